#include "ir/autodiff.h"

#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

constexpr int64_t kVocab = 7;
constexpr int64_t kHidden = 5;

// tokens -> embedding -> linear -> cross_entropy, with `batch` sequences of 3 tokens.
Graph TinyForward(int64_t batch) {
  Graph g("tiny");
  TensorId tokens = *g.AddInput("tokens", Shape({batch, 3}), DType::kI64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", Shape({batch, 3}), DType::kI64, TensorRole::kInput);
  TensorId table = *g.AddInput("embed", Shape({kVocab, kHidden}), DType::kF64,
                               TensorRole::kParameter);
  TensorId head = *g.AddInput("head", Shape({kVocab, kHidden}), DType::kF64,
                              TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kEmbedding, {tokens, table}, {}, OpInfo{}, {{"h"}}))[0];
  TensorId a = (*g.AddOp(OpKind::kGelu, {h}, {}, OpInfo{Phase::kForward, 0, -1}, {{"a"}}))[0];
  TensorId logits = (*g.AddOp(OpKind::kLinear, {a, head}, {}, OpInfo{}, {{"logits"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {}, OpInfo{},
                            {{"loss", TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  return g;
}

// Feeds by name so that graphs with different ids get the same values.
absl::flat_hash_map<TensorId, HostTensor> Feed(
    const Graph& g, const absl::flat_hash_map<std::string, HostTensor>& by_name) {
  absl::flat_hash_map<TensorId, HostTensor> feeds;
  for (TensorId id : g.InputIds()) feeds[id] = by_name.at(g.tensor(id).name);
  return feeds;
}

HostTensor Random(Shape shape, std::mt19937_64& rng, double lo, double hi) {
  HostTensor t(std::move(shape), DType::kF64);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (double& x : t.data) x = dist(rng);
  return t;
}

HostTensor Tokens(int64_t batch, std::mt19937_64& rng) {
  HostTensor t(Shape({batch, 3}), DType::kI64);
  std::uniform_int_distribution<int64_t> dist(0, kVocab - 1);
  for (double& x : t.data) x = static_cast<double>(dist(rng));
  return t;
}

// Splits rows [begin, begin + rows) of a [batch, 3] tensor.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t rows) {
  HostTensor out(Shape({rows, 3}), t.dtype);
  for (int64_t i = 0; i < rows * 3; ++i) out[i] = t[begin * 3 + i];
  return out;
}

// The training step holds forward, backward and optimizer phases and the expected outputs.
TEST(AutodiffTest, TrainingStepHasAllPhasesAndOutputs) {
  TrainingOptions options;
  options.microbatches = 2;
  auto step = BuildTrainingStep(TinyForward(2), options);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->Validate().ok()) << step->Validate();
  int forward = 0, backward = 0, optimizer = 0, adamw = 0, accumulate = 0;
  for (const Op& op : step->ops()) {
    forward += op.info.phase == Phase::kForward;
    backward += op.info.phase == Phase::kBackward;
    optimizer += op.info.phase == Phase::kOptimizer;
    adamw += op.kind == OpKind::kAdamW;
    accumulate += op.kind == OpKind::kAccumulate;
  }
  EXPECT_EQ(forward, 2 * 4 + 2 + 1);  // two copies, two loss scalings, the total
  EXPECT_GT(backward, 0);
  EXPECT_EQ(adamw, 2);
  EXPECT_GE(accumulate, 3);  // loss total, two parameter gradients (+ clip norm)
  // total loss + (param, m, v) per parameter
  ASSERT_EQ(step->outputs().size(), 1u + 2 * 3);
  EXPECT_EQ(step->tensor(step->outputs()[0]).role, TensorRole::kLoss);
  EXPECT_EQ(step->tensor(step->outputs()[1]).name, "embed.new");
  EXPECT_TRUE(step->FindTensor("tokens.mb1").has_value());
  EXPECT_TRUE(step->FindTensor("embed.m").has_value());
}

// Two micro-batches of B sequences give the same loss and update as one batch of 2B:
// loss normalisation and gradient accumulation are exact.
TEST(AutodiffTest, MicrobatchesMatchFullBatch) {
  std::mt19937_64 rng(42);
  HostTensor tokens = Tokens(4, rng), targets = Tokens(4, rng);
  absl::flat_hash_map<std::string, HostTensor> values = {
      {"embed", Random(Shape({kVocab, kHidden}), rng, -1, 1)},
      {"head", Random(Shape({kVocab, kHidden}), rng, -1, 1)},
      {"embed.m", Random(Shape({kVocab, kHidden}), rng, -0.1, 0.1)},
      {"head.m", Random(Shape({kVocab, kHidden}), rng, -0.1, 0.1)},
      {"embed.v", Random(Shape({kVocab, kHidden}), rng, 0, 0.01)},
      {"head.v", Random(Shape({kVocab, kHidden}), rng, 0, 0.01)},
  };
  for (double clip : {0.0, 0.05}) {
    TrainingOptions options;
    options.max_grad_norm = clip;
    options.lr = 0.01;
    auto one = BuildTrainingStep(TinyForward(4), options);
    options.microbatches = 2;
    auto two = BuildTrainingStep(TinyForward(2), options);
    ASSERT_TRUE(one.ok() && two.ok());
    auto v1 = values, v2 = values;
    v1["tokens"] = tokens;
    v1["targets"] = targets;
    v2["tokens.mb0"] = Rows(tokens, 0, 2);
    v2["tokens.mb1"] = Rows(tokens, 2, 2);
    v2["targets.mb0"] = Rows(targets, 0, 2);
    v2["targets.mb1"] = Rows(targets, 2, 2);
    auto r1 = Evaluate(*one, Feed(*one, v1));
    auto r2 = Evaluate(*two, Feed(*two, v2));
    ASSERT_TRUE(r1.ok()) << r1.status();
    ASSERT_TRUE(r2.ok()) << r2.status();
    ASSERT_EQ(one->outputs().size(), two->outputs().size());
    for (size_t i = 0; i < one->outputs().size(); ++i) {
      const HostTensor& a = *(*r1)[one->outputs()[i]];
      const HostTensor& b = *(*r2)[two->outputs()[i]];
      ASSERT_EQ(a.size(), b.size());
      for (int64_t e = 0; e < a.size(); ++e) {
        EXPECT_NEAR(a[e], b[e], 1e-12) << one->tensor(one->outputs()[i]).name << "[" << e
                                       << "] clip " << clip;
      }
    }
  }
}

// The grad norm sums each layer's squares first (one accumulate per layer, tagged
// with it), then those and the untagged parameters' squares.
TEST(AutodiffTest, GradNormSumsEachLayerFirst) {
  Graph g("layered");
  TensorId tokens = *g.AddInput("tokens", Shape({2, 3}), DType::kI64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", Shape({2, 3}), DType::kI64, TensorRole::kInput);
  TensorId table = *g.AddInput("embed", Shape({kVocab, kHidden}), DType::kF64,
                               TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kEmbedding, {tokens, table}, {}, OpInfo{}, {{"h"}}))[0];
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* w : {"wa", "wb"}) {
      TensorId weight = *g.AddInput(absl::StrCat("layers.", layer, ".", w),
                                    Shape({kHidden, kHidden}), DType::kF64,
                                    TensorRole::kParameter);
      h = (*g.AddOp(OpKind::kLinear, {h, weight}, {}, OpInfo{Phase::kForward, layer, -1},
                    {{absl::StrCat("h.", layer, ".", w)}}))[0];
    }
  }
  TensorId head = *g.AddInput("head", Shape({kVocab, kHidden}), DType::kF64,
                              TensorRole::kParameter);
  TensorId logits = (*g.AddOp(OpKind::kLinear, {h, head}, {}, OpInfo{}, {{"logits"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {}, OpInfo{},
                            {{"loss", TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  TrainingOptions options;
  options.max_grad_norm = 1.0;
  auto step = BuildTrainingStep(g, options);
  ASSERT_TRUE(step.ok()) << step.status();
  auto producer = [&](const std::string& name) -> const Op& {
    return step->op(step->tensor(*step->FindTensor(name)).producer);
  };
  auto input_names = [&](const Op& op) {
    std::vector<std::string> names;
    for (TensorId t : op.inputs) names.push_back(step->tensor(t).name);
    return names;
  };
  const Op& total = producer("grad_sq.total");
  EXPECT_EQ(total.kind, OpKind::kAccumulate);
  EXPECT_EQ(total.info.layer, -1);
  EXPECT_EQ(input_names(total), (std::vector<std::string>{"grad_sq.embed", "grad_sq.head",
                                                          "grad_sq.layer.0", "grad_sq.layer.1"}));
  for (int layer = 0; layer < 2; ++layer) {
    const Op& sum = producer(absl::StrCat("grad_sq.layer.", layer));
    EXPECT_EQ(sum.kind, OpKind::kAccumulate);
    EXPECT_EQ(sum.info.layer, layer);
    EXPECT_EQ(sum.info.phase, Phase::kOptimizer);
    EXPECT_EQ(input_names(sum),
              (std::vector<std::string>{absl::StrCat("grad_sq.layers.", layer, ".wa"),
                                        absl::StrCat("grad_sq.layers.", layer, ".wb")}));
  }
}

// A parameter used twice (tied weights) receives the sum of both contributions.
TEST(AutodiffTest, SumsContributionsOfTiedParameter) {
  Graph g("tied");
  TensorId x = *g.AddInput("x", Shape({2, 3}), DType::kF64, TensorRole::kParameter);
  TensorId y = (*g.AddOp(OpKind::kMul, {x, x}, {}, OpInfo{}, {{"y"}}))[0];
  TensorId s = (*g.AddOp(OpKind::kSum, {y}, {{"dims", std::vector<int64_t>{0, 1}}}, OpInfo{},
                         {{"s", TensorRole::kLoss}}))[0];
  auto grads = AppendBackward(g, s, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_TRUE((*grads)[0].has_value());
  EXPECT_EQ(g.op(g.tensor(*(*grads)[0]).producer).kind, OpKind::kAdd);
  HostTensor xv(Shape({2, 3}), DType::kF64);
  for (int i = 0; i < 6; ++i) xv[i] = i - 2.5;
  auto r = Evaluate(g, {{x, xv}});
  ASSERT_TRUE(r.ok()) << r.status();
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ((*(*r)[*(*grads)[0]])[i], 2 * xv[i]);
}

// A loss that is not a float scalar is rejected with its name.
TEST(AutodiffTest, RejectsNonScalarLoss) {
  Graph g("bad");
  TensorId x = *g.AddInput("x", Shape({2}), DType::kF64, TensorRole::kParameter);
  auto grads = AppendBackward(g, x, {x});
  ASSERT_FALSE(grads.ok());
  EXPECT_NE(grads.status().message().find("'x'"), std::string::npos);
}

// A graph without a single loss output is rejected before anything is built.
TEST(AutodiffTest, TrainingStepNeedsOneLossOutput) {
  Graph g("no_loss");
  *g.AddInput("x", Shape({2}), DType::kF64, TensorRole::kParameter);
  auto step = BuildTrainingStep(g, TrainingOptions{});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.status().message().find("exactly one output"), std::string::npos);
}

// tokens -> embedding -> gelu -> linear in bf16, the logits cast to f32 for the
// cross-entropy (as the bf16 models build it), with `batch` sequences of 3 tokens.
Graph TinyBf16Forward(int64_t batch) {
  Graph g("tiny_bf16");
  TensorId tokens = *g.AddInput("tokens", Shape({batch, 3}), DType::kI64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", Shape({batch, 3}), DType::kI64, TensorRole::kInput);
  TensorId table = *g.AddInput("embed", Shape({kVocab, kHidden}), DType::kBF16,
                               TensorRole::kParameter);
  TensorId head = *g.AddInput("head", Shape({kVocab, kHidden}), DType::kBF16,
                              TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kEmbedding, {tokens, table}, {}, OpInfo{}, {{"h"}}))[0];
  TensorId a = (*g.AddOp(OpKind::kGelu, {h}, {}, OpInfo{Phase::kForward, 0, -1}, {{"a"}}))[0];
  TensorId logits = (*g.AddOp(OpKind::kLinear, {a, head}, {}, OpInfo{}, {{"logits"}}))[0];
  TensorId up = (*g.AddOp(OpKind::kCast, {logits}, {{"dtype", std::string("f32")}}, OpInfo{},
                          {{"logits_f32"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kCrossEntropy, {up, targets}, {}, OpInfo{},
                            {{"loss", TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  return g;
}

TrainingOptions Bf16Options(int microbatches) {
  TrainingOptions options;
  options.microbatches = microbatches;
  options.precision = Precision::kBf16;
  return options;
}

// The bf16 step's tensors by role: bf16 parameters, f32 masters and moments, bf16
// per-micro-batch gradients cast to f32 main gradients before their accumulation,
// f32 clipping, AdamW on the master and the new bf16 parameter cast from it.
TEST(AutodiffTest, Bf16StepHasMegatronDtypesByRole) {
  auto step = BuildTrainingStep(TinyBf16Forward(2), Bf16Options(2));
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->Validate().ok()) << step->Validate();
  auto dtype = [&](const std::string& name) {
    std::optional<TensorId> t = step->FindTensor(name);
    EXPECT_TRUE(t.has_value()) << name;
    return t.has_value() ? step->tensor(*t).dtype : DType::kI64;
  };
  auto producer = [&](const std::string& name) -> const Op& {
    return step->op(step->tensor(*step->FindTensor(name)).producer);
  };
  for (const std::string p : {"embed", "head"}) {
    EXPECT_EQ(dtype(p), DType::kBF16) << p;
    for (const std::string state : {".master", ".m", ".v"}) {
      EXPECT_EQ(dtype(p + state), DType::kF32) << p + state;
      EXPECT_EQ(step->tensor(*step->FindTensor(p + state)).role, TensorRole::kOptimizerState);
    }
    for (int mb = 0; mb < 2; ++mb) {
      const Op& cast = producer(absl::StrCat("main_grad.", p, ".mb", mb));
      EXPECT_EQ(cast.kind, OpKind::kCast);
      EXPECT_EQ(cast.info.phase, Phase::kBackward);
      EXPECT_EQ(cast.info.microbatch, mb);
      EXPECT_EQ(step->tensor(cast.inputs[0]).dtype, DType::kBF16) << "the backward's gradient";
      EXPECT_EQ(dtype(absl::StrCat("main_grad.", p, ".mb", mb)), DType::kF32);
    }
    const Op& acc = producer("grad." + p);
    EXPECT_EQ(acc.kind, OpKind::kAccumulate);
    EXPECT_EQ(dtype("grad." + p), DType::kF32);
    EXPECT_EQ(dtype("grad_clipped." + p), DType::kF32);
    const Op& adamw = producer(p + ".master.new");
    EXPECT_EQ(adamw.kind, OpKind::kAdamW);
    EXPECT_EQ(step->tensor(adamw.inputs[0]).name, p + ".master");
    EXPECT_EQ(step->tensor(adamw.inputs[1]).name, "grad_clipped." + p);
    const Op& cast = producer(p + ".new");
    EXPECT_EQ(cast.kind, OpKind::kCast);
    EXPECT_EQ(cast.inputs[0], *step->FindTensor(p + ".master.new"));
    EXPECT_EQ(dtype(p + ".new"), DType::kBF16);
    EXPECT_EQ(step->tensor(*step->FindTensor(p + ".new")).role, TensorRole::kParameter);
  }
  EXPECT_EQ(dtype("loss.total"), DType::kF32);
  EXPECT_EQ(dtype("grad_sq.total"), DType::kF32);
  std::vector<std::string> outputs;
  for (TensorId t : step->outputs()) outputs.push_back(step->tensor(t).name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss.total", "embed.new", "embed.master.new",
                                               "embed.m.new", "embed.v.new", "head.new",
                                               "head.master.new", "head.m.new", "head.v.new"}));
}

// With SGD the master is updated alone: outputs are the loss, then per parameter
// its new bf16 value and its new master.
TEST(AutodiffTest, Bf16SgdStepUpdatesTheMaster) {
  TrainingOptions options = Bf16Options(1);
  options.optimizer = OptimizerKind::kSgd;
  auto step = BuildTrainingStep(TinyBf16Forward(2), options);
  ASSERT_TRUE(step.ok()) << step.status();
  std::vector<std::string> outputs;
  for (TensorId t : step->outputs()) outputs.push_back(step->tensor(t).name);
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "embed.new", "embed.master.new",
                                               "head.new", "head.master.new"}));
  EXPECT_FALSE(step->FindTensor("embed.m").has_value());
  const Op& sgd = step->op(step->tensor(*step->FindTensor("embed.master.new")).producer);
  EXPECT_EQ(sgd.kind, OpKind::kSgd);
  EXPECT_EQ(step->tensor(sgd.inputs[1]).dtype, DType::kF32);
}

// Over the reals a cast is the identity: fed the same values, the bf16 step
// (evaluated in f64) gives the loss and updates of the same step without
// masters, and its new parameter equals its new master.
TEST(AutodiffTest, Bf16StepComputesTheFp32StepOverTheReals) {
  std::mt19937_64 rng(3);
  absl::flat_hash_map<std::string, HostTensor> values = {
      {"tokens.mb0", Tokens(2, rng)}, {"tokens.mb1", Tokens(2, rng)},
      {"targets.mb0", Tokens(2, rng)}, {"targets.mb1", Tokens(2, rng)}};
  for (const char* p : {"embed", "head"}) {
    values[p] = Random(Shape({kVocab, kHidden}), rng, -1, 1);
    values[absl::StrCat(p, ".master")] = values[p];
    values[absl::StrCat(p, ".m")] = Random(Shape({kVocab, kHidden}), rng, -0.1, 0.1);
    values[absl::StrCat(p, ".v")] = Random(Shape({kVocab, kHidden}), rng, 0, 0.01);
  }
  auto mixed = BuildTrainingStep(TinyBf16Forward(2), Bf16Options(2));
  TrainingOptions plain_options;
  plain_options.microbatches = 2;
  auto plain = BuildTrainingStep(TinyBf16Forward(2), plain_options);
  ASSERT_TRUE(mixed.ok() && plain.ok());
  auto rm = Evaluate(*mixed, Feed(*mixed, values));
  auto rp = Evaluate(*plain, Feed(*plain, values));
  ASSERT_TRUE(rm.ok()) << rm.status();
  ASSERT_TRUE(rp.ok()) << rp.status();
  auto value = [](const Graph& g, const TensorValues& r, const std::string& name) {
    return *r[*g.FindTensor(name)];
  };
  for (const std::string name : {"loss.total", "embed.new", "head.new", "embed.m.new",
                                 "head.v.new"}) {
    const HostTensor a = value(*mixed, *rm, name), b = value(*plain, *rp, name);
    ASSERT_EQ(a.size(), b.size());
    for (int64_t e = 0; e < a.size(); ++e) EXPECT_NEAR(a[e], b[e], 1e-12) << name << "[" << e << "]";
  }
  const HostTensor p = value(*mixed, *rm, "embed.new"), master = value(*mixed, *rm, "embed.master.new");
  for (int64_t e = 0; e < p.size(); ++e) EXPECT_EQ(p[e], master[e]);
}

// The fp32 step is not touched by the mixed-precision option's existence: no
// masters, no casts, every state in the parameters' dtype.
TEST(AutodiffTest, Fp32StepHasNoMastersOrCasts) {
  auto step = BuildTrainingStep(TinyForward(2), TrainingOptions{});
  ASSERT_TRUE(step.ok()) << step.status();
  for (const Op& op : step->ops()) EXPECT_NE(op.kind, OpKind::kCast);
  for (const Tensor& t : step->tensors()) {
    EXPECT_FALSE(absl::EndsWith(t.name, ".master")) << t.name;
    if (IsFloat(t.dtype)) {
      EXPECT_EQ(t.dtype, DType::kF64) << t.name;
    }
  }
}

// A mixed-precision step needs bf16 parameters: an f64 forward is refused by name.
TEST(AutodiffTest, Bf16StepRejectsNonBf16Parameters) {
  auto step = BuildTrainingStep(TinyForward(2), Bf16Options(1));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(step.status().message().find("parameter 'embed'"), std::string::npos)
      << step.status();
}

// A master names its parameter; nothing else does.
TEST(AutodiffTest, ParameterOfMasterFindsOnlyMasters) {
  auto step = BuildTrainingStep(TinyBf16Forward(2), Bf16Options(1));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(ParameterOfMaster(*step, *step->FindTensor("head.master")),
            step->FindTensor("head"));
  for (const char* other : {"head", "head.m", "head.master.new", "tokens"}) {
    EXPECT_FALSE(ParameterOfMaster(*step, *step->FindTensor(other)).has_value()) << other;
  }
}

// Random feeds start each master at its parameter's values (an f32 copy), and
// the moments apart from them.
TEST(AutodiffTest, RandomFeedsStartMastersAtTheirParameters) {
  auto step = BuildTrainingStep(TinyBf16Forward(2), Bf16Options(1));
  ASSERT_TRUE(step.ok()) << step.status();
  auto feeds = RandomFeeds(*step, /*seed=*/9);
  for (const char* p : {"embed", "head"}) {
    const HostTensor& param = feeds.at(*step->FindTensor(p));
    const HostTensor& master = feeds.at(*step->FindTensor(absl::StrCat(p, ".master")));
    EXPECT_EQ(master.data, param.data) << p;
    EXPECT_EQ(master.dtype, DType::kF32);
    EXPECT_NE(feeds.at(*step->FindTensor(absl::StrCat(p, ".m"))).data, param.data) << p;
  }
}

// Precision names parse back; anything else names the accepted values.
TEST(AutodiffTest, ParsesPrecisionNames) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    EXPECT_EQ(*ParsePrecision(PrecisionName(p)), p);
  }
  auto bad = ParsePrecision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bf16, fp32"), std::string::npos) << bad.status();
  EXPECT_EQ(ModelDType(Precision::kBf16), DType::kBF16);
  EXPECT_EQ(ModelDType(Precision::kFp32), DType::kF32);
}

}  // namespace
}  // namespace loom::ir
