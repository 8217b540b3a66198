#include "transform/parallelize.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "exec/plan_interpreter.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/plan.h"
#include "models/models.h"

namespace loom::transform {
namespace {

// The training step of a tiny model with `microbatches` micro-batches.
ir::Graph TinyStep(const std::string& model, int microbatches, int layers = 0, int64_t batch = 0) {
  models::ModelOptions options;
  options.tiny = true;
  options.layers = layers;
  options.batch = batch;
  options.dtype = ir::DType::kF64;
  auto forward = models::BuildForward(model, options);
  EXPECT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.microbatches = microbatches;
  auto step = ir::BuildTrainingStep(*forward, training);
  EXPECT_TRUE(step.ok()) << step.status();
  return *std::move(step);
}

struct Case {
  std::string name;
  std::string model;
  Strategy strategy;
  int layers = 0;
  int64_t batch = 0;
};

Strategy Make(int dp, int tp, int pp, int mb, int vpp = 1, bool sp = false, int zero = 0,
              bool recompute = false) {
  Strategy s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.microbatches = mb;
  s.vpp = vpp;
  s.sp = sp;
  s.zero = zero;
  s.recompute = recompute;
  return s;
}

std::vector<Case> Matrix() {
  std::vector<Case> cases;
  for (const char* model : {"gpt2", "llama3-8b"}) {
    std::string m = model;
    std::string tag = m == "gpt2" ? "gpt2" : "llama3";
    cases.push_back({tag + "_single", m, Make(1, 1, 1, 1)});
    cases.push_back({tag + "_dp2", m, Make(2, 1, 1, 2)});
    cases.push_back({tag + "_tp2", m, Make(1, 2, 1, 1)});
    cases.push_back({tag + "_tp4_sp", m, Make(1, 4, 1, 1, 1, true), 2, 2});
    cases.push_back({tag + "_pp2", m, Make(1, 1, 2, 2)});
    cases.push_back({tag + "_pp4_vpp2", m, Make(1, 1, 4, 2, 2), 8});
    cases.push_back({tag + "_dp2_tp2_pp2_mb2", m, Make(2, 2, 2, 2)});
    cases.push_back({tag + "_dp2_tp2_sp", m, Make(2, 2, 1, 1, 1, true)});
    cases.push_back({tag + "_zero1_dp2", m, Make(2, 1, 1, 2, 1, false, 1)});
    cases.push_back({tag + "_zero2_dp2_tp2", m, Make(2, 2, 1, 2, 1, false, 2)});
    cases.push_back({tag + "_zero3_tp2", m, Make(2, 2, 1, 1, 1, false, 3)});
    cases.push_back({tag + "_recompute_tp2_pp2", m, Make(1, 2, 2, 2, 1, false, 0, true)});
    cases.push_back({tag + "_dp2_tp2_pp2_sp_zero1_recompute", m,
                     Make(2, 2, 2, 2, 1, true, 1, true)});
    cases.push_back({tag + "_dp4_tp2_pp2", m, Make(4, 2, 2, 2), 0, 4});
  }
  return cases;
}

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
  ir::Graph spec = TinyStep("llama3-8b", /*microbatches=*/2, /*layers=*/2, /*batch=*/4);
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
  EXPECT_GT(dp_allreduce, 0);
  EXPECT_GT(tp_allreduce, 0);
  EXPECT_GT(pp_sendrecv, 0);
}

// With sequence parallelism the tensor-parallel boundaries become all-gather /
// reduce-scatter pairs.
TEST(ParallelizeTest, SequenceParallelUsesGatherAndReduceScatter) {
  ir::Graph spec = TinyStep("llama3-8b", 1, 1, 2);
  auto plan = Parallelize(spec, Make(1, 2, 1, 1, 1, /*sp=*/true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto counts = CountCollectives(*plan);
  EXPECT_GT(counts["all_gather"], 0);
  EXPECT_GT(counts["reduce_scatter"], 0);
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
