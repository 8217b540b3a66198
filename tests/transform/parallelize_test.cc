#include "transform/parallelize.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "exec/plan_interpreter.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "ir/autodiff.h"
#include "ir/plan.h"
#include "models/models.h"

namespace loom::transform {
namespace {

using ::loom::testing::TinyBf16Step;
using ::loom::testing::TinyStep;

using ::loom::testing::Bf16Matrix;
using ::loom::testing::Case;
using ::loom::testing::Make;
using ::loom::testing::Matrix;

class ParallelizeMatrixTest : public ::testing::TestWithParam<Case> {};

// Running the plan task by task reproduces the single-device step: loss, every
// gradient and every updated parameter agree to 1e-9 in fp64.
TEST_P(ParallelizeMatrixTest, PlanMatchesReferenceNumerically) {
  const Case& c = GetParam();
  ir::Graph spec = TinyStep(c.model, c.strategy.microbatches, c.layers,
                            c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  auto plan = Parallelize(spec, c.strategy);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ir::ValidatePlan(spec, *plan).ok()) << ir::ValidatePlan(spec, *plan);
  auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/7);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->values_checked, 0);
  EXPECT_LE(report->max_rel_error_loss, 1e-9) << report->worst;
  EXPECT_LE(report->max_rel_error_gradients, 1e-9) << report->worst;
  EXPECT_LE(report->max_rel_error_parameters, 1e-9) << report->worst;
  EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
}

INSTANTIATE_TEST_SUITE_P(Strategies, ParallelizeMatrixTest, ::testing::ValuesIn(Matrix()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

std::map<std::string, int> CountCollectives(const ir::Plan& plan) {
  std::map<std::string, int> counts;
  for (const ir::Collective& c : plan.collectives) ++counts[std::string(ir::CollectiveKindName(c.kind))];
  return counts;
}

// llama3-8b under dp2 tp2 pp2: gradient all-reduce across dp, tensor-parallel
// all-reduces, pipeline send/recv; every collective's group lies on one axis.
TEST(ParallelizeTest, Llama3PlanHasTheExpectedCollectives) {
  models::ModelOptions options;  // full size: 32 layers, d 4096, sequences of 4096
  options.batch = 2;
  auto forward = models::BuildForward("llama3-8b", options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.microbatches = 2;
  auto step = ir::BuildTrainingStep(*forward, training);
  ASSERT_TRUE(step.ok()) << step.status();
  const ir::Graph& spec = *step;
  auto plan = Parallelize(spec, Make(2, 2, 2, 2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ir::Mesh& mesh = plan->mesh;
  int dp_allreduce = 0, tp_allreduce = 0, pp_sendrecv = 0;
  for (const ir::Collective& c : plan->collectives) {
    std::vector<int> varying;
    for (int a = 0; a < static_cast<int>(mesh.axes().size()); ++a) {
      std::set<int64_t> coords;
      for (int64_t d : c.devices) coords.insert(mesh.Coordinates(d)[a]);
      if (coords.size() > 1) varying.push_back(a);
    }
    ASSERT_EQ(varying.size(), 1u) << "collective " << c.id << " spans several axes";
    const std::string axis = mesh.axes()[varying[0]].name;
    if (c.kind == ir::CollectiveKind::kAllReduce && axis == "dp" &&
        spec.tensor(plan->values[c.inputs[0]].sub.tensor).role == ir::TensorRole::kGradient) {
      ++dp_allreduce;
    }
    if (c.kind == ir::CollectiveKind::kAllReduce && axis == "tp") ++tp_allreduce;
    if (c.kind == ir::CollectiveKind::kSendRecv) {
      EXPECT_EQ(axis, "pp");
      ++pp_sendrecv;
    }
  }
  // Every parameter's gradient is all-reduced across dp once per step, after the
  // micro-batches are accumulated: one collective per tp rank holding a piece.
  int params = 0;
  for (ir::TensorId t : spec.InputIds()) params += spec.tensor(t).role == ir::TensorRole::kParameter;
  EXPECT_GE(dp_allreduce, params);
  // Attention and MLP blocks each end in a row-parallel all-reduce, per micro-batch,
  // forward and backward.
  EXPECT_GE(tp_allreduce, 32 * 2 * 2);
  // Activations cross the pipeline boundary forward and their gradients backward.
  EXPECT_GT(pp_sendrecv, 0);
}

// With sequence parallelism the tensor-parallel boundaries become all-gather /
// reduce-scatter pairs.
TEST(ParallelizeTest, SequenceParallelUsesGatherAndReduceScatter) {
  ir::Graph spec = TinyStep("llama3-8b", 1, 2, 2);
  auto plan = Parallelize(spec, Make(1, 2, 1, 1, 1, /*sp=*/true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto counts = CountCollectives(*plan);
  // Each of the 2 layers' 2 blocks enters its tensor-parallel region with a
  // sequence all-gather and leaves it with a reduce-scatter (forward).
  EXPECT_GE(counts["all_gather"], 4);
  EXPECT_GE(counts["reduce_scatter"], 4);
  auto plain = Parallelize(spec, Make(1, 2, 1, 1));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(CountCollectives(*plain)["reduce_scatter"], 0);
}

// Under sequence parallelism a weight is never gathered whole across the tensor-
// parallel group (it would stay whole on every device through every micro-batch):
// the backward of a row-parallel linear computes with the weight's shard and
// gathers the activation gradient, and a weight gradient is computed on its
// weight's shard (never a partial sum of a whole-size gradient).
TEST(ParallelizeTest, SequenceParallelNeverGathersWeights) {
  for (const char* model : {"llama3-8b", "gpt2"}) {
    ir::Graph spec = TinyStep(model, 2, 2, 2);
    auto plan = Parallelize(spec, Make(1, 2, 1, 2, 1, /*sp=*/true));
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const ir::Collective& c : plan->collectives) {
      if (c.kind != ir::CollectiveKind::kAllGather) continue;
      for (ir::ValueId v : c.outputs) {
        const ir::Tensor& t = spec.tensor(plan->values[v].sub.tensor);
        EXPECT_NE(t.role, ir::TensorRole::kParameter)
            << model << ": collective " << c.id << " gathers weight '" << t.name << "'";
      }
    }
    int weight_gradients = 0;
    for (const ir::Task& t : plan->tasks) {
      if (t.kind != ir::OpKind::kLinearWGrad && t.kind != ir::OpKind::kEmbeddingGrad) continue;
      ++weight_gradients;
      const ir::PlanValue& out = plan->values[t.outputs[0]];
      EXPECT_TRUE(out.sub.part.IsFull())
          << model << ": task " << t.id << " '" << ir::OpKindName(t.kind) << "' computes "
          << out.sub.part.ToString() << " of '" << spec.tensor(out.sub.tensor).name << "'";
    }
    EXPECT_GT(weight_gradients, 0);
    auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/11);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
  }
}

// Under sequence parallelism the residual stream between tensor-parallel regions
// holds sequence pieces (a row-parallel linear's partial sums are reduce-scattered
// into them), never whole partial sums that every micro-batch in flight would keep.
TEST(ParallelizeTest, SequenceParallelResidualStreamHoldsSequencePieces) {
  ir::Graph spec = TinyStep("llama3-8b", 2, 2, 2);
  auto plan = Parallelize(spec, Make(1, 2, 1, 2, 1, /*sp=*/true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  int residual_adds = 0;
  for (const ir::Task& t : plan->tasks) {
    if (t.kind != ir::OpKind::kAdd || t.info.phase != ir::Phase::kForward || t.info.layer < 0 ||
        t.recompute) {
      continue;
    }
    const ir::PlanValue& out = plan->values[t.outputs[0]];
    const ir::Tensor& tensor = spec.tensor(out.sub.tensor);
    if (tensor.shape.rank() != 3) continue;
    ++residual_adds;
    EXPECT_TRUE(out.sub.part.IsFull()) << "'" << tensor.name << "' " << out.sub.part.ToString();
    EXPECT_EQ(out.sub.box[1].size() * 2, tensor.shape.dim(1))
        << "'" << tensor.name << "' " << ir::BoxToString(out.sub.box);
  }
  EXPECT_GT(residual_adds, 0);
}

// Expert weights split over the tensor-parallel group as well as by expert (gate
// and up projections column-parallel, down projection row-parallel): each device
// holds at most 1/(ep x tp) of them, computes their weight gradients on its share,
// and no collective gathers or exchanges partial sums.
TEST(ParallelizeTest, ExpertWeightsSplitOverTensorParallelism) {
  // dp 2 x ep 2: one copy of each expert; dp 4 x ep 2: two, whose weight gradients
  // are partial sums over the two until reduced.
  for (int dp : {2, 4}) {
    ir::Graph spec = TinyStep("deepseek-v3-671b", 2, 2, 2 * dp);
    transform::Strategy s = Make(dp, 2, 1, 2, 1, /*sp=*/true, /*zero=*/1);
    s.ep = 2;
    auto plan = Parallelize(spec, s);
    ASSERT_TRUE(plan.ok()) << plan.status();
    int expert_weights = 0, expert_gradients = 0;
    for (const ir::PlanValue& v : plan->values) {
      const ir::Tensor& t = spec.tensor(v.sub.tensor);
      if (t.name.find(".moe.experts.w_") == std::string::npos ||
          t.role != ir::TensorRole::kParameter || t.producer != ir::kNoId) {
        continue;
      }
      ++expert_weights;
      // The ffn dim (the output of gate and up, the input of down) is halved.
      const int ffn = absl::StrContains(t.name, "w_down") ? 1 : 2;
      EXPECT_EQ(v.sub.box[ffn].size() * 2, t.shape.dim(ffn))
          << t.name << " " << ir::BoxToString(v.sub.box);
      EXPECT_LE(ir::ValueShape(v).num_elements() * 4, t.shape.num_elements())
          << t.name << " " << ir::BoxToString(v.sub.box);
    }
    for (const ir::Task& task : plan->tasks) {
      const ir::PlanValue& out = plan->values[task.outputs[0]];
      const ir::Tensor& t = spec.tensor(out.sub.tensor);
      if (task.info.phase != ir::Phase::kBackward || task.kind != ir::OpKind::kMatMul ||
          !absl::StartsWith(t.name, "d.") ||
          t.name.find(".moe.experts.w_") == std::string::npos) {
        continue;
      }
      ++expert_gradients;
      if (dp == 2) {
        EXPECT_TRUE(out.sub.part.IsFull()) << t.name << " " << out.sub.part.ToString();
      }
      EXPECT_LE(ir::ValueShape(out).num_elements() * 4, t.shape.num_elements())
          << t.name << " " << ir::BoxToString(out.sub.box);
    }
    EXPECT_GT(expert_weights, 0);
    EXPECT_GT(expert_gradients, 0);
    for (const ir::Collective& c : plan->collectives) {
      if (c.kind != ir::CollectiveKind::kAllGather && c.kind != ir::CollectiveKind::kAllToAll) {
        continue;
      }
      for (ir::ValueId v : c.inputs) {
        EXPECT_TRUE(plan->values[v].sub.part.IsFull())
            << ir::CollectiveKindName(c.kind) << " " << c.id << " moves a partial sum of '"
            << spec.tensor(plan->values[v].sub.tensor).name << "'";
      }
    }
    auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/13);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
  }
}

// A canonical description of a plan that ignores how its ids are numbered.
std::multiset<std::string> Canonical(const ir::Plan& plan) {
  auto sub = [&](ir::ValueId id) {
    const ir::PlanValue& v = plan.values[id];
    return absl::StrCat(v.device, ":", v.sub.tensor, ir::BoxToString(v.sub.box),
                        v.sub.part.ToString(), "@", v.microbatch);
  };
  std::multiset<std::string> items;
  for (const ir::Task& t : plan.tasks) {
    std::string s = absl::StrCat("task ", ir::OpKindName(t.kind), " op", t.op, " dev", t.device,
                                 " mb", t.info.microbatch, " ", t.attrs.ToString(),
                                 t.recompute ? " recompute" : "", " in");
    for (ir::ValueId v : t.inputs) absl::StrAppend(&s, " ", sub(v));
    absl::StrAppend(&s, " out");
    for (ir::ValueId v : t.outputs) absl::StrAppend(&s, " ", sub(v));
    items.insert(s);
  }
  for (const ir::Collective& c : plan.collectives) {
    std::string s = absl::StrCat("coll ", ir::CollectiveKindName(c.kind), " dim", c.dim, ",",
                                 c.dim2, " in");
    for (ir::ValueId v : c.inputs) absl::StrAppend(&s, " ", sub(v));
    absl::StrAppend(&s, " out");
    for (ir::ValueId v : c.outputs) absl::StrAppend(&s, " ", sub(v));
    items.insert(s);
  }
  for (ir::ValueId v : plan.outputs) items.insert("output " + sub(v));
  return items;
}

// Expanding the factored plan gives the explicit plan: the same tasks, collectives,
// values and outputs (ids aside), and it checks out numerically.
TEST(ParallelizeTest, FactoredPlanExpandsToTheExplicitOne) {
  struct F {
    std::string model;
    Strategy s;
  };
  Strategy ep2 = Make(4, 1, 2, 2);
  ep2.ep = 2;
  for (const F& f : std::vector<F>{{"llama3-8b", Make(2, 2, 2, 2)},
                                   {"gpt2", Make(4, 1, 1, 3, 1, false, 1)},
                                   {"gpt2", Make(2, 2, 1, 3, 1, true, 2)},
                                   {"llama3-8b", Make(2, 2, 1, 2, 1, false, 3)},
                                   {"llama3-8b", Make(2, 1, 2, 2, 1, false, 0, true)},
                                   {"deepseek-v3-671b", ep2}}) {
    SCOPED_TRACE(f.model + " " + f.s.ToString());
    ir::Graph spec = TinyStep(f.model, f.s.microbatches, 2, 2 * f.s.dp);
    Strategy factored = f.s;
    factored.factored = true;
    auto explicit_plan = Parallelize(spec, f.s);
    auto factored_plan = Parallelize(spec, factored);
    ASSERT_TRUE(explicit_plan.ok()) << explicit_plan.status();
    ASSERT_TRUE(factored_plan.ok()) << factored_plan.status();
    ASSERT_TRUE(ir::ValidatePlan(spec, *factored_plan).ok())
        << ir::ValidatePlan(spec, *factored_plan);
    EXPECT_LT(factored_plan->tasks.size(), explicit_plan->tasks.size());
    auto expanded = ir::ExpandPlan(spec, *factored_plan);
    ASSERT_TRUE(expanded.ok()) << expanded.status();
    EXPECT_EQ(expanded->tasks.size(), explicit_plan->tasks.size());
    EXPECT_EQ(expanded->collectives.size(), explicit_plan->collectives.size());
    EXPECT_EQ(expanded->values.size(), explicit_plan->values.size());
    const auto a = Canonical(*expanded), b = Canonical(*explicit_plan);
    std::vector<std::string> only_expanded, only_explicit;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_expanded));
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_explicit));
    EXPECT_TRUE(only_expanded.empty() && only_explicit.empty())
        << only_expanded.size() << " only in the expanded plan, e.g. "
        << (only_expanded.empty() ? "" : only_expanded[0]) << "\n"
        << only_explicit.size() << " only in the explicit plan, e.g. "
        << (only_explicit.empty() ? "" : only_explicit[0]);
    auto report = exec::CheckPlanNumerics(spec, *factored_plan, /*seed=*/3);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
  }
}

// Elements of `tensor` each device is given as a plan input (a value nothing computes).
std::map<int64_t, int64_t> InputElementsByDevice(const ir::Plan& plan, ir::TensorId tensor) {
  std::vector<bool> computed(plan.values.size(), false);
  for (const ir::Task& t : plan.tasks) {
    for (ir::ValueId v : t.outputs) computed[v] = true;
  }
  for (const ir::Collective& c : plan.collectives) {
    for (ir::ValueId v : c.outputs) computed[v] = true;
  }
  std::map<int64_t, int64_t> elements;
  for (const ir::PlanValue& v : plan.values) {
    if (computed[v.id] || v.sub.tensor != tensor) continue;
    int64_t n = 1;
    for (int64_t d : ir::BoxDims(v.sub.box)) n *= d;
    elements[v.device] += n;
  }
  return elements;
}

// The first moment `<param>.m` of master `<param>.master`.
ir::TensorId MomentOfMaster(const ir::Graph& spec, ir::TensorId master) {
  const std::string& name = spec.tensor(master).name;
  return *spec.FindTensor(name.substr(0, name.size() - std::string(".master").size()) + ".m");
}

// The bf16 mixed-precision step under every strategy of its matrix: the plan,
// explicit and factored, reproduces the single-device step (fp64 arithmetic, where
// casts are the identity) to 1e-9, and every device holds as much of each master
// as of its first moment.
class Bf16ParallelizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16ParallelizeTest, PlanMatchesReferenceNumerically) {
  const Case& c = GetParam();
  ir::Graph spec = TinyBf16Step(c.model, c.strategy.microbatches, c.layers,
                                c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  for (bool factored : {false, true}) {
    SCOPED_TRACE(factored ? "factored" : "explicit");
    Strategy s = c.strategy;
    s.factored = factored;
    auto plan = Parallelize(spec, s);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(ir::ValidatePlan(spec, *plan).ok()) << ir::ValidatePlan(spec, *plan);
    auto report = exec::CheckPlanNumerics(spec, *plan, /*seed=*/5);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_GT(report->values_checked, 0);
    EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
    if (factored) continue;
    for (const ir::Tensor& t : spec.tensors()) {
      if (!ir::ParameterOfMaster(spec, t.id).has_value()) continue;
      EXPECT_EQ(InputElementsByDevice(*plan, t.id),
                InputElementsByDevice(*plan, MomentOfMaster(spec, t.id)))
          << t.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, Bf16ParallelizeTest, ::testing::ValuesIn(Bf16Matrix()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// ZeRO-1 (the distributed optimizer) shards each f32 master over the data-parallel
// group exactly as it shards the moments: each device holds the master's and the
// moments' same 1/dp of the parameter's tensor-parallel piece. Without ZeRO every
// replica holds its whole piece.
TEST(ParallelizeTest, ZeroOneShardsMastersLikeMoments) {
  ir::Graph spec = TinyBf16Step("llama3-8b", 2, 2, 4);
  for (int zero : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    std::vector<std::string> whole;
    auto plan = Parallelize(spec, Make(2, 2, 1, 2, 1, false, zero), &whole);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(whole.empty());
    int masters = 0;
    for (const ir::Tensor& t : spec.tensors()) {
      std::optional<ir::TensorId> param = ir::ParameterOfMaster(spec, t.id);
      if (!param.has_value()) continue;
      ++masters;
      const auto master = InputElementsByDevice(*plan, t.id);
      const auto m = InputElementsByDevice(*plan, MomentOfMaster(spec, t.id));
      const auto p = InputElementsByDevice(*plan, *param);
      EXPECT_EQ(master, m) << t.name;
      ASSERT_EQ(master.size(), 4u) << t.name;
      for (const auto& [device, n] : master) {
        EXPECT_EQ(n * (zero == 1 ? 2 : 1), p.at(device)) << t.name << " on device " << device;
      }
    }
    EXPECT_EQ(masters, std::count_if(spec.tensors().begin(), spec.tensors().end(),
                                     [](const ir::Tensor& t) {
                                       return t.role == ir::TensorRole::kParameter &&
                                              t.producer == ir::kNoId;
                                     }));
  }
}

// In the bf16 step the data-parallel reduction reads only f32 gradients (the
// accumulated main gradients); the one bf16 traffic across replicas is the
// all-gather of the updated bf16 parameters.
TEST(ParallelizeTest, Bf16ReducesMainGradientsInF32) {
  ir::Graph spec = TinyBf16Step("llama3-8b", 2, 2, 4);
  auto plan = Parallelize(spec, Make(2, 2, 2, 2, 1, false, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ir::Mesh& mesh = plan->mesh;
  const int dp_axis = 0;
  ASSERT_EQ(mesh.axes()[dp_axis].name, "dp");
  int f32_reductions = 0, bf16_gathers = 0;
  for (const ir::Collective& c : plan->collectives) {
    std::set<int64_t> replicas;
    for (int64_t d : c.devices) replicas.insert(mesh.Coordinates(d)[dp_axis]);
    if (replicas.size() < 2) continue;
    const ir::PlanValue& in = plan->values[c.inputs[0]];
    const ir::Tensor& t = spec.tensor(in.sub.tensor);
    if (c.kind == ir::CollectiveKind::kAllGather) {
      EXPECT_EQ(t.role, ir::TensorRole::kParameter) << t.name;
      bf16_gathers += in.dtype == ir::DType::kBF16;
      continue;
    }
    EXPECT_EQ(in.dtype, ir::DType::kF32) << ir::CollectiveKindName(c.kind) << " of " << t.name;
    if (t.role == ir::TensorRole::kGradient && absl::StartsWith(t.name, "grad.")) ++f32_reductions;
  }
  EXPECT_GT(f32_reductions, 0);
  EXPECT_GT(bf16_gathers, 0);
}

// An explicit plan too large to hold is refused with a pointer to the factored form.
// Clipping under pipeline parallelism: each stage scales its own gradients by the
// coefficient, which is the only thing that crosses stages after the backward
// (besides the norm's pieces): no gradient travels to another stage and back.
TEST(ParallelizeTest, ClippingMovesScalarsBetweenStagesNotGradients) {
  for (const char* model : {"llama3-8b", "gpt2"}) {
    ir::Graph spec = TinyStep(model, 2, 4, 2);
    auto plan = Parallelize(spec, Make(1, 1, 2, 2));
    ASSERT_TRUE(plan.ok()) << plan.status();
    int crossings = 0;
    for (const ir::Collective& c : plan->collectives) {
      if (c.kind != ir::CollectiveKind::kSendRecv || c.phase != ir::Phase::kOptimizer) continue;
      ++crossings;
      const ir::PlanValue& v = plan->values[c.inputs[0]];
      const ir::Tensor& t = spec.tensor(v.sub.tensor);
      // gpt2's tied embedding: the last stage's share of its gradient goes to the
      // first stage once (the two uses' sum), never back.
      if (absl::StartsWith(t.name, "grad") && std::string(model) == "gpt2") continue;
      EXPECT_EQ(t.shape.num_elements(), 1)
          << model << ": '" << t.name << "' crosses stages in the optimizer phase";
    }
    EXPECT_GT(crossings, 0) << model;
  }
}

TEST(ParallelizeTest, RefusesHugeExplicitPlans) {
  models::ModelOptions options;
  options.batch = 1024;
  auto forward = models::BuildForward("llama3-405b", options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto step = ir::BuildTrainingStep(*forward, ir::TrainingOptions{});
  ASSERT_TRUE(step.ok()) << step.status();
  Strategy s = Make(1024, 8, 16, 1);
  auto plan = Parallelize(*step, s);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("factored"), std::string::npos) << plan.status();
}

// Bad strategies are one clear error each.
TEST(ParallelizeTest, RejectsImpossibleStrategies) {
  ir::Graph spec = TinyStep("llama3-8b", 2, 2, 4);
  struct Bad {
    Strategy s;
    std::string needle;
  };
  std::vector<Bad> bad = {
      {Make(1, 3, 1, 2), "heads"},
      {Make(1, 1, 4, 2), "layers"},
      {Make(3, 1, 1, 2), "batch"},
      {Make(1, 1, 1, 3), "micro-batches"},
      {Make(1, 1, 1, 2, 1, /*sp=*/true), "sequence parallelism"},
      {Make(1, 1, 1, 2, 1, false, /*zero=*/5), "zero"},
      {Make(1, 1, 1, 2, 1, false, /*zero=*/1), "dp >= 2"},
      {Make(1, 1, 1, 2, /*vpp=*/2), "pp >= 2"},
  };
  for (const Bad& b : bad) {
    auto plan = Parallelize(spec, b.s);
    ASSERT_FALSE(plan.ok()) << b.s.ToString();
    EXPECT_NE(plan.status().message().find(b.needle), std::string::npos)
        << plan.status().message();
  }
}

}  // namespace
}  // namespace loom::transform
