#include "models/models.h"

#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using ir::Graph;
using ir::OpKind;
using ir::TensorId;
using ir::TensorRole;

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelInfo& m : ListModels()) names.push_back(m.name);
  return names;
}

ModelOptions Tiny() {
  ModelOptions o;
  o.tiny = true;
  return o;
}

const ir::Tensor& TensorNamed(const Graph& g, absl::string_view name) {
  std::optional<TensorId> id = g.FindTensor(name);
  EXPECT_TRUE(id.has_value()) << "no tensor '" << name << "' in " << g.name();
  return g.tensor(id.value_or(0));
}

std::vector<int64_t> DimsOf(const Graph& g, absl::string_view name) {
  return TensorNamed(g, name).shape.dims();
}

int MaxLayer(const Graph& g) {
  int max_layer = -1;
  for (const ir::Op& op : g.ops()) max_layer = std::max(max_layer, op.info.layer);
  return max_layer;
}

// ---- the zoo ------------------------------------------------------------------

// The zoo lists every model once, in a fixed order, with a family and description.
TEST(ModelsTest, ListsTheZooInOrder) {
  EXPECT_EQ(ModelNames(),
            (std::vector<std::string>{"mlp", "gpt2", "llama3-8b", "llama3-70b", "llama3-405b",
                                      "deepseek-v2-lite-16b", "deepseek-v2-236b",
                                      "deepseek-v3-671b"}));
  for (const ModelInfo& m : ListModels()) {
    EXPECT_FALSE(m.family.empty()) << m.name;
    EXPECT_FALSE(m.description.empty()) << m.name;
    EXPECT_TRUE(absl::StartsWith(m.name, m.family)) << m.name;
  }
}

// An unknown name is NotFound and lists the known models.
TEST(ModelsTest, UnknownModelIsNotFoundListingTheZoo) {
  auto g = BuildForward("llama4", {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(g.status().message(),
            "unknown model 'llama4' (known: mlp, gpt2, llama3-8b, llama3-70b, llama3-405b, "
            "deepseek-v2-lite-16b, deepseek-v2-236b, deepseek-v3-671b)");
}

// Negative sizes and integer dtypes are InvalidArgument naming the option.
TEST(ModelsTest, RejectsBadOptionsNamingThem) {
  struct Case {
    ModelOptions options;
    const char* option;
  };
  std::vector<Case> cases(4);
  cases[0].options.layers = -1;
  cases[0].option = "'layers'";
  cases[1].options.batch = -2;
  cases[1].option = "'batch'";
  cases[2].options.seq = -3;
  cases[2].option = "'seq'";
  cases[3].options.dtype = ir::DType::kI32;
  cases[3].option = "'dtype'";
  for (const Case& c : cases) {
    for (const std::string& name : ModelNames()) {
      auto g = BuildForward(name, c.options);
      ASSERT_FALSE(g.ok()) << name << " " << c.option;
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_TRUE(absl::StrContains(g.status().message(), c.option)) << g.status().message();
    }
  }
}

// GPT-2's learned position table bounds the sequence length.
TEST(ModelsTest, Gpt2RejectsSequencesLongerThanItsContext) {
  ModelOptions o;
  o.seq = 1025;
  auto g = BuildForward("gpt2", o);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(), "option 'seq' (1025) exceeds the context length 1024 of gpt2");
  o.seq = 1024;
  EXPECT_TRUE(BuildForward("gpt2", o).ok());
}

// Capacity is ceil(tokens * k / E * 1.25), computed exactly (tokens: one sequence).
TEST(ModelsTest, ExpertCapacityRoundsUp) {
  EXPECT_EQ(ExpertCapacity(/*tokens=*/16, /*top_k=*/2, /*experts=*/8), 5);   // 5.0
  EXPECT_EQ(ExpertCapacity(/*tokens=*/15, /*top_k=*/2, /*experts=*/8), 5);   // 4.6875
  EXPECT_EQ(ExpertCapacity(/*tokens=*/4096, /*top_k=*/8, /*experts=*/256), 160);
  EXPECT_EQ(ExpertCapacity(/*tokens=*/4096, /*top_k=*/6, /*experts=*/160), 192);
  EXPECT_EQ(ExpertCapacity(/*tokens=*/1, /*top_k=*/1, /*experts=*/64), 1);  // 0.02
}

// ---- parameter counts ---------------------------------------------------------

struct CountCase {
  const char* name;
  double published;
  double tolerance;  // relative
};

class ParameterCountTest : public ::testing::TestWithParam<CountCase> {};

// The full-size graph's parameter total matches the published figure.
TEST_P(ParameterCountTest, MatchesPublishedTotal) {
  const CountCase& c = GetParam();
  auto g = BuildForward(c.name, {});
  ASSERT_TRUE(g.ok()) << g.status();
  const double count = static_cast<double>(g->CountElements(TensorRole::kParameter));
  EXPECT_NEAR(count / c.published, 1.0, c.tolerance)
      << c.name << ": " << count << " parameters, published " << c.published;
  for (const ModelInfo& m : ListModels()) {
    if (m.name == c.name) {
      EXPECT_EQ(m.published_params, c.published);
    }
  }
  std::cout << c.name << ": " << static_cast<int64_t>(count) << " parameters ("
            << (count / c.published - 1.0) * 100 << "% from published)\n";
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ParameterCountTest,
    ::testing::Values(CountCase{"gpt2", 124439808, 0}, CountCase{"llama3-8b", 8.03e9, 0.01},
                      CountCase{"llama3-70b", 70.6e9, 0.01},
                      CountCase{"llama3-405b", 405.9e9, 0.01},
                      CountCase{"deepseek-v2-lite-16b", 15.7e9, 0.01},
                      CountCase{"deepseek-v2-236b", 236e9, 0.01},
                      CountCase{"deepseek-v3-671b", 671e9, 0.03}),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      std::string n = info.param.name;
      for (char& ch : n) {
        if (ch == '-') ch = '_';
      }
      return n;
    });

// Exact totals, from the architecture's closed form (embeddings, blocks, final norm).
TEST(ModelsTest, ExactParameterTotals) {
  auto count = [](const char* name) {
    auto g = BuildForward(name, {});
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? g->CountElements(TensorRole::kParameter) : 0;
  };
  // 2 V d + L (d (d + 2 kv hd) + d d + 3 d f + 2 d) + d
  auto llama = [](int64_t d, int64_t L, int64_t kv_dim, int64_t f) {
    const int64_t V = 128256;
    return 2 * V * d + L * (d * (d + 2 * kv_dim) + d * d + 3 * d * f + 2 * d) + d;
  };
  EXPECT_EQ(count("llama3-8b"), llama(4096, 32, 1024, 14336));
  EXPECT_EQ(count("llama3-8b"), int64_t{8030261248});
  EXPECT_EQ(count("llama3-70b"), llama(8192, 80, 1024, 28672));
  EXPECT_EQ(count("llama3-405b"), llama(16384, 126, 1024, 53248));
  EXPECT_EQ(count("gpt2"), int64_t{124439808});
  // Plain MLP: V d + L (2 d f + f + d) + V d + V.
  EXPECT_EQ(count("mlp"), int64_t{32000} * 4096 + 8 * (2 * int64_t{4096} * 16384 + 16384 + 4096) +
                              int64_t{32000} * 4096 + 32000);
}

// ---- every model, tiny and full -------------------------------------------------

class ModelTest : public ::testing::TestWithParam<std::string> {};

// Checks the contract every forward graph meets.
void ExpectWellFormed(const Graph& g, int64_t batch, int64_t seq, int layers) {
  ASSERT_TRUE(g.Validate().ok()) << g.Validate();
  for (const char* input : {"tokens", "targets"}) {
    const ir::Tensor& t = TensorNamed(g, input);
    EXPECT_EQ(t.role, TensorRole::kInput);
    EXPECT_EQ(t.dtype, ir::DType::kI64);
    EXPECT_EQ(t.shape, ir::Shape({batch, seq}, {"b", "s"}));
  }
  int data_inputs = 0;
  for (TensorId id : g.InputIds()) {
    const ir::Tensor& t = g.tensor(id);
    if (t.role == TensorRole::kInput) {
      ++data_inputs;
    } else {
      EXPECT_EQ(t.role, TensorRole::kParameter) << t.name;
      EXPECT_FALSE(g.consumers(id).empty()) << "parameter " << t.name << " is never read";
    }
  }
  EXPECT_EQ(data_inputs, 2);
  ASSERT_EQ(g.outputs().size(), 1u);
  const ir::Tensor& loss = g.tensor(g.outputs()[0]);
  EXPECT_EQ(loss.name, "loss");
  EXPECT_EQ(loss.role, TensorRole::kLoss);
  EXPECT_EQ(loss.shape.rank(), 0);
  EXPECT_EQ(g.op(loss.producer).kind, OpKind::kScale);  // the mean of the token losses
  // Ops are forward, for no particular micro-batch, and a block's ops read only that
  // block's parameters.
  for (const ir::Op& op : g.ops()) {
    EXPECT_EQ(op.info.phase, ir::Phase::kForward);
    EXPECT_EQ(op.info.microbatch, -1);
    EXPECT_GE(op.info.layer, -1);
    EXPECT_LT(op.info.layer, layers);
    for (TensorId in : op.inputs) {
      const ir::Tensor& t = g.tensor(in);
      if (t.role != TensorRole::kParameter) continue;
      if (op.info.layer >= 0) {
        EXPECT_TRUE(absl::StartsWith(t.name, absl::StrCat("layers.", op.info.layer, ".")))
            << ir::DescribeOp(g, op) << " (layer " << op.info.layer << ") reads " << t.name;
      } else {
        EXPECT_FALSE(absl::StartsWith(t.name, "layers.")) << ir::DescribeOp(g, op);
      }
    }
  }
  EXPECT_EQ(MaxLayer(g), layers - 1);
}

// The tiny graph is well formed: two i64 inputs, parameters all read, one scalar loss,
// ops tagged with their block.
TEST_P(ModelTest, TinyGraphIsWellFormed) {
  auto g = BuildForward(GetParam(), Tiny());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), GetParam());
  ExpectWellFormed(*g, /*batch=*/2, /*seq=*/8, /*layers=*/2);
}

// The full-size graph is well formed, with batch 1 and the configuration's depth.
TEST_P(ModelTest, FullGraphIsWellFormed) {
  auto g = BuildForward(GetParam(), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t seq = TensorNamed(*g, "tokens").shape.dim(1);
  EXPECT_EQ(seq, GetParam() == "gpt2" || GetParam() == "mlp" ? 1024 : 4096);
  ExpectWellFormed(*g, /*batch=*/1, seq, MaxLayer(*g) + 1);
  EXPECT_GE(MaxLayer(*g), 7);
}

// The tiny graph runs in the interpreter and its loss is close to log(vocab), as
// for near-uniform predictions from small random weights.
TEST_P(ModelTest, TinyGraphEvaluatesToLossNearLogVocab) {
  auto g = BuildForward(GetParam(), Tiny());
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t vocab = TensorNamed(*g, "logits").shape.dims().back();
  EXPECT_LE(vocab, 128);
  auto feeds = ir::RandomFeeds(*g, /*seed=*/7, /*scale=*/0.1,
                               {{"tokens", vocab}, {"targets", vocab}});
  auto values = ir::Evaluate(*g, feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  const std::optional<ir::HostTensor>& loss = (*values)[g->outputs()[0]];
  ASSERT_TRUE(loss.has_value());
  ASSERT_EQ(loss->size(), 1);
  const double l = (*loss)[0];
  EXPECT_TRUE(std::isfinite(l));
  EXPECT_GT(l, 0.0);
  EXPECT_NEAR(l, std::log(static_cast<double>(vocab)), 0.25) << GetParam();

  // Larger weights sharpen the logits, and random targets then cost more: the loss
  // depends on the parameters.
  auto big = ir::RandomFeeds(*g, /*seed=*/7, /*scale=*/1.0,
                             {{"tokens", vocab}, {"targets", vocab}});
  auto big_values = ir::Evaluate(*g, big);
  ASSERT_TRUE(big_values.ok()) << big_values.status();
  const double big_loss = (*(*big_values)[g->outputs()[0]])[0];
  EXPECT_TRUE(std::isfinite(big_loss));
  EXPECT_GT(big_loss, l + 0.5) << GetParam();
}

// The layers option sets the depth: each extra block adds the same number of ops
// (once past DeepSeek's dense layers).
TEST_P(ModelTest, LayersOptionSetsTheDepth) {
  std::vector<int> ops;
  for (int layers : {2, 3, 4}) {
    ModelOptions o = Tiny();
    o.layers = layers;
    auto g = BuildForward(GetParam(), o);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(MaxLayer(*g), layers - 1);
    ops.push_back(g->num_ops());
  }
  EXPECT_GT(ops[1], ops[0]);
  EXPECT_EQ(ops[2] - ops[1], ops[1] - ops[0]);

  ModelOptions one;
  one.layers = 1;
  auto g = BuildForward(GetParam(), one);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(MaxLayer(*g), 0);
}

// batch, seq and dtype options reach the inputs and the parameters.
TEST_P(ModelTest, BatchSeqAndDtypeOptionsApply) {
  ModelOptions o = Tiny();
  o.batch = 3;
  o.seq = 5;
  o.dtype = ir::DType::kBF16;
  auto g = BuildForward(GetParam(), o);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(DimsOf(*g, "tokens"), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(DimsOf(*g, "logits")[0], 3);
  EXPECT_EQ(DimsOf(*g, "logits")[1], 5);
  for (TensorId id : g->InputIds()) {
    const ir::Tensor& t = g->tensor(id);
    if (t.role == TensorRole::kParameter) {
      EXPECT_EQ(t.dtype, ir::DType::kBF16) << t.name;
    }
  }
}

// A bf16 model computes its cross-entropy in f32, on its logits cast up (as
// Megatron-LM does): the loss is f32, everything before the cast bf16. An f32
// model has no cast.
TEST_P(ModelTest, Bf16ModelsComputeTheirLossInF32) {
  ModelOptions o = Tiny();
  o.dtype = ir::DType::kBF16;
  auto g = BuildForward(GetParam(), o);
  ASSERT_TRUE(g.ok()) << g.status();
  auto cast = g->FindTensor("loss.logits_f32");
  ASSERT_TRUE(cast.has_value());
  const ir::Op& op = g->op(g->tensor(*cast).producer);
  EXPECT_EQ(op.kind, OpKind::kCast);
  EXPECT_EQ(g->tensor(op.inputs[0]).name, "logits");
  EXPECT_EQ(g->tensor(op.inputs[0]).dtype, ir::DType::kBF16);
  EXPECT_EQ(g->tensor(*cast).dtype, ir::DType::kF32);
  EXPECT_EQ(g->tensor(g->outputs()[0]).dtype, ir::DType::kF32);
  auto f32 = BuildForward(GetParam(), Tiny());
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_FALSE(f32->FindTensor("loss.logits_f32").has_value());
  for (const ir::Op& o32 : f32->ops()) EXPECT_NE(o32.kind, OpKind::kCast);
}

// Op kinds of the ops tagged `layer`, in order.
std::vector<OpKind> KindsOfLayer(const Graph& g, int layer) {
  std::vector<OpKind> kinds;
  for (const ir::Op& op : g.ops()) {
    if (op.info.layer == layer) kinds.push_back(op.kind);
  }
  return kinds;
}

// Tiny graphs keep the full op sequence: the same embedding and head, the same first
// block and the same last block (a MoE block for DeepSeek, whose tiny configs keep
// one dense layer).
TEST_P(ModelTest, TinyKeepsTheFullOpSequence) {
  ModelOptions full;
  full.layers = 4;
  auto a = BuildForward(GetParam(), full);
  auto b = BuildForward(GetParam(), Tiny());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(KindsOfLayer(*a, -1), KindsOfLayer(*b, -1));
  EXPECT_EQ(KindsOfLayer(*a, 0), KindsOfLayer(*b, 0));
  EXPECT_EQ(KindsOfLayer(*a, 3), KindsOfLayer(*b, 1));
  EXPECT_FALSE(KindsOfLayer(*b, 1).empty());
}

INSTANTIATE_TEST_SUITE_P(Zoo, ModelTest, ::testing::ValuesIn(ModelNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// ---- family specifics -----------------------------------------------------------

// Llama 3 attention is grouped-query: 8 kv heads shared by 32/64/128 query heads.
TEST(ModelsTest, Llama3AttentionIsGroupedQuery) {
  struct Case {
    const char* name;
    int64_t heads, kv_heads, head_dim;
  };
  for (const Case& c : {Case{"llama3-8b", 32, 8, 128}, Case{"llama3-70b", 64, 8, 128},
                        Case{"llama3-405b", 128, 8, 128}}) {
    auto g = BuildForward(c.name, {});
    ASSERT_TRUE(g.ok()) << g.status();
    const std::vector<int64_t> q = {1, 4096, c.heads, c.head_dim};
    const std::vector<int64_t> kv = {1, 4096, c.kv_heads, c.head_dim};
    EXPECT_EQ(DimsOf(*g, "layers.0.attn.q"), q) << c.name;
    EXPECT_EQ(DimsOf(*g, "layers.0.attn.k"), kv) << c.name;
    EXPECT_EQ(DimsOf(*g, "layers.0.attn.v"), kv) << c.name;
    EXPECT_EQ(DimsOf(*g, "layers.0.attn.ctx_heads"), q) << c.name;
    EXPECT_EQ(DimsOf(*g, "layers.0.attn.wk"),
              (std::vector<int64_t>{c.kv_heads * c.head_dim, c.heads * c.head_dim}));
  }
  auto tiny = BuildForward("llama3-8b", Tiny());
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(DimsOf(*tiny, "layers.1.attn.q"), (std::vector<int64_t>{2, 8, 8, 4}));
  EXPECT_EQ(DimsOf(*tiny, "layers.1.attn.k"), (std::vector<int64_t>{2, 8, 4, 4}));
}

// GPT-2 ties its head to the token table and adds the first seq rows of wpe.
TEST(ModelsTest, Gpt2TiesTheHeadAndAddsLearnedPositions) {
  ModelOptions o;
  o.seq = 256;
  o.batch = 2;
  auto g = BuildForward("gpt2", o);
  ASSERT_TRUE(g.ok()) << g.status();
  const TensorId wte = *g->FindTensor("wte");
  ASSERT_EQ(g->consumers(wte).size(), 2u);
  EXPECT_EQ(g->op(g->consumers(wte)[0]).kind, OpKind::kEmbedding);
  const ir::Op& head = g->op(g->consumers(wte)[1]);
  EXPECT_EQ(head.kind, OpKind::kLinear);
  EXPECT_EQ(g->tensor(head.outputs[0]).name, "logits");
  EXPECT_EQ(head.inputs.size(), 2u);  // no bias
  EXPECT_FALSE(g->FindTensor("head.w").has_value());
  EXPECT_EQ(DimsOf(*g, "wpe"), (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(DimsOf(*g, "h.pos_rows"), (std::vector<int64_t>{256, 768}));
  EXPECT_EQ(DimsOf(*g, "h.pos"), (std::vector<int64_t>{2, 256, 768}));
  EXPECT_EQ(DimsOf(*g, "logits"), (std::vector<int64_t>{2, 256, 50257}));
}

// DeepSeek-V3 MLA: q and k carry 128 + 64 dims per head, v 128, from a 512-dim latent;
// the MoE layers route one sequence of 4096 tokens to 256 experts of capacity 160.
TEST(ModelsTest, DeepSeekV3LatentAttentionAndExpertShapes) {
  auto g = BuildForward("deepseek-v3-671b", {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.wq_a"), (std::vector<int64_t>{1536, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.wq_b"), (std::vector<int64_t>{128 * 192, 1536}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.wkv_a"), (std::vector<int64_t>{576, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.wkv_b"), (std::vector<int64_t>{128 * 256, 512}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.c_kv"), (std::vector<int64_t>{1, 4096, 512}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.k_rope1"), (std::vector<int64_t>{1, 4096, 1, 64}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.q"), (std::vector<int64_t>{1, 4096, 128, 192}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.k"), (std::vector<int64_t>{1, 4096, 128, 192}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.v"), (std::vector<int64_t>{1, 4096, 128, 128}));
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.ctx_heads"), (std::vector<int64_t>{1, 4096, 128, 128}));
  // Layers 0-2 are dense, 3-60 MoE.
  EXPECT_TRUE(g->FindTensor("layers.2.mlp.w_gate").has_value());
  EXPECT_FALSE(g->FindTensor("layers.3.mlp.w_gate").has_value());
  EXPECT_EQ(DimsOf(*g, "layers.2.mlp.w_gate"), (std::vector<int64_t>{18432, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.3.moe.router"), (std::vector<int64_t>{256, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.3.moe.experts.w_gate"), (std::vector<int64_t>{256, 7168, 2048}));
  EXPECT_EQ(DimsOf(*g, "layers.3.moe.shared.w_gate"), (std::vector<int64_t>{2048, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.3.moe.gate_indices"), (std::vector<int64_t>{4096, 8}));
  EXPECT_EQ(DimsOf(*g, "layers.3.moe.dispatched"), (std::vector<int64_t>{256, 160, 7168}));
  EXPECT_EQ(DimsOf(*g, "layers.60.moe.out"), (std::vector<int64_t>{1, 4096, 7168}));
  const ir::Op& gate = g->op(TensorNamed(*g, "layers.3.moe.gate_indices").producer);
  EXPECT_EQ(gate.attrs.GetString("score").value_or(""), "sigmoid");
  EXPECT_EQ(gate.attrs.GetInt("normalize").value_or(-1), 1);
  EXPECT_EQ(gate.attrs.GetInt("k").value_or(-1), 8);
  EXPECT_TRUE(g->FindTensor("layers.3.moe.routed_scaled").has_value());
}

// DeepSeek-V2-Lite has no query low-rank and gates with an unnormalised softmax.
TEST(ModelsTest, DeepSeekV2LiteProjectsQueriesDirectly) {
  auto g = BuildForward("deepseek-v2-lite-16b", {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->FindTensor("layers.0.attn.wq_a").has_value());
  EXPECT_EQ(DimsOf(*g, "layers.0.attn.wq"), (std::vector<int64_t>{16 * 192, 2048}));
  EXPECT_EQ(DimsOf(*g, "layers.1.moe.shared.w_up"), (std::vector<int64_t>{2 * 1408, 2048}));
  const ir::Op& gate = g->op(TensorNamed(*g, "layers.1.moe.gate_indices").producer);
  EXPECT_EQ(gate.attrs.GetString("score").value_or(""), "softmax");
  EXPECT_EQ(gate.attrs.GetInt("normalize").value_or(-1), 0);
  EXPECT_EQ(gate.attrs.GetInt("k").value_or(-1), 6);
  EXPECT_FALSE(g->FindTensor("layers.1.moe.routed_scaled").has_value());  // factor 1
  auto v2 = BuildForward("deepseek-v2-236b", {});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_TRUE(v2->FindTensor("layers.0.attn.wq_a").has_value());
  EXPECT_EQ(DimsOf(*v2, "layers.1.moe.dispatched"), (std::vector<int64_t>{160, 192, 5120}));
}

// Tiny MoE layers route each sequence as one group with its own capacity, so the
// expert buffers hold batch * capacity(seq) slots per expert.
TEST(ModelsTest, TinyMoeCapacityFollowsTheMicroBatch) {
  ModelOptions o = Tiny();
  o.batch = 3;
  o.seq = 5;
  auto g = BuildForward("deepseek-v3-671b", o);
  ASSERT_TRUE(g.ok()) << g.status();
  // seq = 5 tokens, top-2 of 8 experts: ceil(5 * 2 / 8 * 1.25) = 2 slots per sequence.
  EXPECT_EQ(DimsOf(*g, "layers.1.moe.dispatched"), (std::vector<int64_t>{8, 3 * 2, 32}));
  const ir::Op& dispatch = g->op(TensorNamed(*g, "layers.1.moe.dispatched").producer);
  EXPECT_EQ(dispatch.attrs.GetInt("capacity").value_or(-1), 2);
  EXPECT_EQ(dispatch.attrs.GetInt("groups").value_or(-1), 3);
  const ir::Op& combine = g->op(TensorNamed(*g, "layers.1.moe.routed").producer);
  EXPECT_EQ(combine.attrs.GetInt("groups").value_or(-1), 3);
}

}  // namespace
}  // namespace loom::models

namespace loom::models {
namespace {

// The written-out loss equals the fused cross_entropy op on the same logits.
TEST(ModelsLossTest, ComposedLossEqualsCrossEntropy) {
  for (const char* name : {"gpt2", "llama3-8b", "deepseek-v3-671b"}) {
    ModelOptions options;
    options.tiny = true;
    options.dtype = ir::DType::kF64;
    auto g = BuildForward(name, options);
    ASSERT_TRUE(g.ok()) << g.status();
    auto feeds = ir::RandomFeeds(*g, /*seed=*/5, 1.0, {{"tokens", 64}, {"targets", 64}});
    auto values = ir::Evaluate(*g, feeds);
    ASSERT_TRUE(values.ok()) << values.status();
    auto max_op = g->tensor(*g->FindTensor("loss.row_max")).producer;
    ir::TensorId logits = g->op(max_op).inputs[0];
    ir::TensorId targets = *g->FindTensor("targets");
    ir::HostTensor fused(ir::Shape(), ir::DType::kF64);
    std::vector<ir::HostTensor> out = {fused};
    std::vector<const ir::HostTensor*> in = {&*(*values)[logits], &*(*values)[targets]};
    ASSERT_TRUE(ir::GetOpSchema(ir::OpKind::kCrossEntropy).kernel(in, {}, absl::MakeSpan(out)).ok());
    const double composed = (*(*values)[g->outputs()[0]])[0];
    EXPECT_NEAR(composed, out[0][0], 1e-12 * std::abs(out[0][0])) << name;
  }
}

}  // namespace
}  // namespace loom::models
