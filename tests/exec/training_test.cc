// Training steps on the CPU backend agree with the single-device reference.

#include "exec/training.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "models/models.h"
#include "schedule/plan_blocks.h"
#include "schedule/predefined.h"
#include "schedule/schedule.h"
#include "schedule/search.h"
#include "tests/testing/strategy_matrix.h"
#include "transform/parallelize.h"

namespace loom::exec {
namespace {

using testing::Make;
using transform::Strategy;

struct RunCase {
  std::string name;
  std::string model;
  Strategy strategy;
  std::string schedule;  // "": data-flow order; "1f1b"; "search"
  int layers = 2;
  int64_t batch = 0;
};

std::vector<RunCase> RunCases() {
  std::vector<RunCase> cases;
  const std::vector<std::pair<std::string, std::string>> models = {
      {"gpt2", "gpt2"}, {"llama3", "llama3-8b"}, {"moe", "deepseek-v3-671b"}};
  for (const auto& [tag, model] : models) {
    cases.push_back({tag + "_dp2_tp2_pp2_1f1b", model, Make(2, 2, 2, 4), "1f1b"});
    cases.push_back({tag + "_dp2_tp2_pp2_searched", model, Make(2, 2, 2, 4), "search"});
    cases.push_back({tag + "_tp4_sp", model, Make(1, 4, 1, 1, 1, true), "", 2, 2});
    cases.push_back({tag + "_pp4_vpp2", model, Make(1, 1, 4, 4, 2), "", 8});
    cases.push_back({tag + "_zero3_dp2_tp2", model, Make(2, 2, 1, 2, 1, false, 3), ""});
  }
  Strategy ep4 = Make(4, 1, 1, 2);
  ep4.ep = 4;
  cases.push_back({"moe_ep4", "deepseek-v3-671b", ep4, "", 2, 4});
  // Context parallelism: every sequence in two chunks, with tensor and pipeline
  // parallelism and a 1F1B schedule.
  cases.push_back({"llama3_cp2_tp2_pp2_1f1b", "llama3-8b", testing::WithCp(Make(1, 2, 2, 4), 2),
                   "1f1b"});
  cases.push_back({"gpt2_cp2_dp2", "gpt2", testing::WithCp(Make(2, 1, 1, 2), 2), ""});
  // Activation recomputation: the forward pieces re-run before their backward.
  cases.push_back({"llama3_recompute_tp2_pp2_1f1b", "llama3-8b",
                   Make(1, 2, 2, 4, 1, false, 0, /*recompute=*/true), "1f1b"});
  return cases;
}

struct Built {
  ir::Graph spec{"empty"};
  ir::Plan plan;
  // With a schedule: the simulated peak memory per pipeline rank (block units).
  std::vector<int64_t> predicted_peak;
};

// The case's tiny model in `dtype`, its plan and (when asked) its schedule.
Built Build(const RunCase& c, ir::DType dtype) {
  Built b;
  models::ModelOptions options;
  options.tiny = true;
  options.layers = c.layers;
  options.batch = c.batch > 0 ? c.batch : 2 * c.strategy.dp;
  options.dtype = dtype;
  auto forward = models::BuildForward(c.model, options);
  EXPECT_TRUE(forward.ok()) << forward.status();
  if (!forward.ok()) return b;
  ir::TrainingOptions training;
  training.microbatches = c.strategy.microbatches;
  auto spec = ir::BuildTrainingStep(*forward, training);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return b;
  b.spec = *std::move(spec);
  auto plan = transform::Parallelize(b.spec, c.strategy);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return b;
  b.plan = *std::move(plan);
  if (c.schedule.empty()) return b;
  auto blocks = schedule::BlocksFromPlan(b.spec, b.plan);
  EXPECT_TRUE(blocks.ok()) << blocks.status();
  if (!blocks.ok()) return b;
  absl::StatusOr<schedule::Schedule> s = absl::UnknownError("none");
  if (c.schedule == "search") {
    schedule::SearchOptions search;
    search.microbatches = c.strategy.microbatches;
    auto found = schedule::SearchSchedule(blocks->model, search);
    EXPECT_TRUE(found.ok()) << found.status();
    if (!found.ok()) return b;
    s = found->schedule;
  } else {
    s = schedule::MakePredefinedSchedule(c.schedule, blocks->model, c.strategy.microbatches);
  }
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return b;
  auto sim = schedule::Simulate(blocks->model, *s);
  EXPECT_TRUE(sim.ok()) << sim.status();
  if (sim.ok()) b.predicted_peak = sim->peak_memory;
  auto ordered = schedule::ApplySchedule(b.plan, *blocks, *s);
  EXPECT_TRUE(ordered.ok()) << ordered.status();
  if (ordered.ok()) b.plan = *std::move(ordered);
  return b;
}

struct Param {
  RunCase c;
  ir::DType precision;
};

class TrainingMatchesReference : public ::testing::TestWithParam<Param> {};

// Three steps of the plan on the CPU backend stay within the precision's
// tolerance of the single-device reference: loss, gradients and parameters.
TEST_P(TrainingMatchesReference, ThreeSteps) {
  const Param& p = GetParam();
  Built b = Build(p.c, p.precision);
  ASSERT_FALSE(b.plan.values.empty());
  if (!p.c.schedule.empty()) {
    ASSERT_FALSE(b.plan.order.empty());
  }
  ExecOptions exec;
  exec.precision = p.precision;
  std::unique_ptr<Backend> backend = MakeCpuBackend(exec);
  TrainOptions options;
  options.steps = 3;
  options.check = true;
  options.precision = p.precision;
  auto report = RunTraining(b.spec, b.plan, *backend, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->steps.size(), 3u);
  ASSERT_TRUE(report->check.has_value());
  const CheckReport& check = *report->check;
  const double tolerance = p.precision == ir::DType::kF32 ? 1e-5 : 1e-10;
  EXPECT_LE(check.loss, tolerance) << check.worst;
  EXPECT_LE(check.gradients, tolerance) << check.worst;
  EXPECT_LE(check.parameters, tolerance) << check.worst;
  EXPECT_GT(check.gradients_compared, 0);
  EXPECT_GT(check.parameters_compared, 0);
  for (const StepReport& s : report->steps) {
    EXPECT_TRUE(std::isfinite(s.loss));
    EXPECT_GT(s.loss, 0);
  }
  // The parameters move: each step's reference loss differs from the last.
  EXPECT_NE(report->steps[0].reference_loss, report->steps[2].reference_loss);
  for (size_t d = 0; d < report->devices.size(); ++d) {
    EXPECT_EQ(report->devices[d].peak_bytes, report->predicted_peak_bytes[d]) << "device " << d;
    EXPECT_EQ(report->devices[d].peak_activation_bytes,
              report->predicted_peak_activation_bytes[d])
        << "device " << d;
  }
}

// The check compares every copy of every output: a plan whose data-parallel
// replica 0 updates one parameter with twice the learning rate is outside
// tolerance, though the last listed copy of that parameter (replica 1's) is
// right. With a low clipping threshold the check says clipping was active.
TEST(TrainingCheckTest, AWrongCopyOnAnyReplicaIsOutsideTolerance) {
  models::ModelOptions options;
  options.tiny = true;
  options.layers = 1;
  options.batch = 2;
  options.dtype = ir::DType::kF64;
  auto forward = models::BuildForward("gpt2", options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.max_grad_norm = 1e-3;
  auto spec = ir::BuildTrainingStep(*forward, training);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = transform::Parallelize(*spec, Make(2, 1, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->is_factored());
  auto run = [&](const ir::Plan& p) {
    ExecOptions exec;
    exec.precision = ir::DType::kF64;
    std::unique_ptr<Backend> backend = MakeCpuBackend(exec);
    TrainOptions train;
    train.steps = 1;
    train.check = true;
    train.precision = ir::DType::kF64;
    auto report = RunTraining(*spec, p, *backend, train);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report->check : CheckReport{};
  };
  const CheckReport right = run(*plan);
  EXPECT_LE(right.parameters, 1e-10) << right.worst;
  ASSERT_TRUE(right.clip_coefficient.has_value());
  EXPECT_LT(*right.clip_coefficient, 1.0);
  ir::Plan wrong = *plan;
  bool mutated = false;
  for (ir::Task& t : wrong.tasks) {
    if (t.kind != ir::OpKind::kAdamW || t.device != 0) continue;
    auto lr = t.attrs.GetFloat("lr");
    ASSERT_TRUE(lr.ok());
    t.attrs.Set("lr", *lr * 2);
    mutated = true;
    break;
  }
  ASSERT_TRUE(mutated);
  const CheckReport caught = run(wrong);
  EXPECT_GT(caught.parameters, 1e-6) << caught.worst;
  EXPECT_NE(caught.worst.find("device 0"), std::string::npos) << caught.worst;
}

// The bf16 mixed-precision step trains: three steps of its plan (ZeRO-1 over dp2,
// tp2, two micro-batches) stay within 1e-10 of the reference in fp64, where casts
// are the identity, and each step carries the new bf16 parameters, masters and
// moments to the next (the parameters move).
TEST(TrainingBf16Test, ThreeStepsCarryParametersAndMasters) {
  models::ModelOptions options;
  options.tiny = true;
  options.layers = 2;
  options.batch = 4;
  options.dtype = ir::DType::kBF16;
  auto forward = models::BuildForward("llama3-8b", options);
  ASSERT_TRUE(forward.ok()) << forward.status();
  ir::TrainingOptions training;
  training.microbatches = 2;
  training.precision = ir::Precision::kBf16;
  auto spec = ir::BuildTrainingStep(*forward, training);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto plan = transform::Parallelize(*spec, Make(2, 2, 1, 2, 1, false, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExecOptions exec;
  exec.precision = ir::DType::kF64;
  std::unique_ptr<Backend> backend = MakeCpuBackend(exec);
  TrainOptions train;
  train.steps = 3;
  train.check = true;
  train.precision = ir::DType::kF64;
  auto report = RunTraining(*spec, *plan, *backend, train);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->check.has_value());
  EXPECT_LE(report->check->loss, 1e-10) << report->check->worst;
  EXPECT_LE(report->check->gradients, 1e-10) << report->check->worst;
  EXPECT_LE(report->check->parameters, 1e-10) << report->check->worst;
  EXPECT_GT(report->check->parameters_compared, 0);
  ASSERT_EQ(report->steps.size(), 3u);
  EXPECT_NE(report->steps[0].reference_loss, report->steps[1].reference_loss);
  EXPECT_NE(report->steps[1].reference_loss, report->steps[2].reference_loss);
}

// Activation memory follows the schedule: where the simulation says GPipe holds
// more micro-batches in flight than 1F1B on a pipeline rank, every device of
// that rank measures a higher activation peak under GPipe, and an equal
// prediction gives an equal peak.
TEST(TrainingMemoryTest, PeaksFollowTheSchedulesPrediction) {
  for (const std::string model : {"gpt2", "llama3-8b", "deepseek-v3-671b"}) {
    SCOPED_TRACE(model);
    RunCase gpipe{"gpipe", model, Make(2, 2, 2, 4), "gpipe"};
    RunCase one_f_one_b{"1f1b", model, Make(2, 2, 2, 4), "1f1b"};
    Built a = Build(gpipe, ir::DType::kF64), b = Build(one_f_one_b, ir::DType::kF64);
    ASSERT_EQ(a.predicted_peak.size(), 2u);
    ASSERT_EQ(b.predicted_peak.size(), 2u);
    std::vector<std::vector<int64_t>> measured;
    for (const Built* built : {&a, &b}) {
      ExecOptions exec;
      exec.precision = ir::DType::kF64;
      std::unique_ptr<Backend> backend = MakeCpuBackend(exec);
      TrainOptions options;
      options.precision = ir::DType::kF64;
      auto report = RunTraining(built->spec, built->plan, *backend, options);
      ASSERT_TRUE(report.ok()) << report.status();
      measured.emplace_back();
      for (const DeviceStats& d : report->devices) {
        measured.back().push_back(d.peak_activation_bytes);
      }
    }
    const int pp_axis = a.plan.mesh.AxisIndex("pp");
    ASSERT_GE(pp_axis, 0);
    bool some_rank_differs = false;
    for (size_t d = 0; d < measured[0].size(); ++d) {
      const int64_t rank = a.plan.mesh.Coordinates(static_cast<int64_t>(d))[pp_axis];
      const int64_t pa = a.predicted_peak[rank], pb = b.predicted_peak[rank];
      if (pa > pb) {
        EXPECT_GT(measured[0][d], measured[1][d]) << "device " << d << ", pipeline rank " << rank;
        some_rank_differs = true;
      } else if (pa == pb) {
        EXPECT_EQ(measured[0][d], measured[1][d]) << "device " << d << ", pipeline rank " << rank;
      }
    }
    EXPECT_TRUE(some_rank_differs) << "GPipe and 1F1B predicted alike on every rank";
  }
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (const RunCase& c : RunCases()) {
    out.push_back({c, ir::DType::kF32});
    out.push_back({c, ir::DType::kF64});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainingMatchesReference, ::testing::ValuesIn(Params()),
    [](const ::testing::TestParamInfo<Param>& info) {
      return info.param.c.name + (info.param.precision == ir::DType::kF32 ? "_fp32" : "_fp64");
    });

}  // namespace
}  // namespace loom::exec
