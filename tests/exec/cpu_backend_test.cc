// The CPU backend's collectives: issue-order mismatches and missing peers stop a
// step with an error naming the devices and collectives, never a hang.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "exec/backend.h"
#include "exec/program.h"
#include "exec/training.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::exec {
namespace {

using ::testing::HasSubstr;
using testing::Make;

// The data-flow order LowerPlan gives, written into the plan as its order.
std::vector<std::vector<ir::PlanStep>> OrderOf(const Program& program) {
  std::vector<std::vector<ir::PlanStep>> order(program.devices.size());
  for (const DeviceProgram& d : program.devices) {
    for (const Instr& i : d.instrs) {
      if (i.kind == InstrKind::kFree) continue;
      order[d.device].push_back({i.kind == InstrKind::kCollective, i.id});
    }
  }
  return order;
}

struct Fixture {
  ir::Graph spec{"empty"};
  ir::Plan plan;
};

// A tiny llama3 step under `s`, its plan ordered.
Fixture Ordered(const transform::Strategy& s) {
  Fixture f;
  f.spec = loom::testing::TinyStep("llama3-8b", s.microbatches, /*layers=*/1, 2 * s.dp);
  auto plan = transform::Parallelize(f.spec, s);
  EXPECT_TRUE(plan.ok()) << plan.status();
  f.plan = *std::move(plan);
  auto program = LowerPlan(f.spec, f.plan);
  EXPECT_TRUE(program.ok()) << program.status();
  f.plan.order = OrderOf(*program);
  return f;
}

absl::Status RunOnce(const Fixture& f, double timeout_s) {
  ExecOptions options;
  options.precision = ir::DType::kF64;
  options.collective_timeout_s = timeout_s;
  std::unique_ptr<Backend> backend = MakeCpuBackend(options);
  TrainOptions train;
  train.precision = ir::DType::kF64;
  return RunTraining(f.spec, f.plan, *backend, train).status();
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The unchanged order runs.
TEST(CpuBackendTest, OrderedPlanRuns) {
  Fixture f = Ordered(Make(2, 1, 1, 1));
  EXPECT_TRUE(RunOnce(f, 30).ok()) << RunOnce(f, 30);
  auto lowered = LowerPlan(f.spec, f.plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_TRUE(CheckCollectiveOrder(*lowered).ok()) << CheckCollectiveOrder(*lowered);
}

// Device 0 issues two gradient all-reduces of its data-parallel group in the
// other order: stopped at once, naming both devices and both collectives.
TEST(CpuBackendTest, CollectivesInDifferentOrdersAreReported) {
  Fixture f = Ordered(Make(2, 1, 1, 1));
  std::vector<ir::PlanStep>& order = f.plan.order[0];
  std::vector<size_t> collectives;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i].is_collective) collectives.push_back(i);
  }
  ASSERT_GE(collectives.size(), 2u);
  // Device 0 issues one of them after a later one instead, with the tasks that
  // depend on it moved along: the first such move its own data flow allows.
  int32_t first = -1, second = -1;
  const std::vector<ir::PlanStep> original = order;
  for (size_t k = 0; k + 1 < collectives.size() && first < 0; ++k) {
    const size_t x = collectives[k], y = collectives[k + 1];
    absl::flat_hash_set<ir::ValueId> depends(f.plan.collectives[original[x].id].outputs.begin(),
                                             f.plan.collectives[original[x].id].outputs.end());
    std::vector<ir::PlanStep> before, after{original[x]};
    bool independent = true;
    for (size_t i = x + 1; i <= y; ++i) {
      const ir::PlanStep& st = original[i];
      const std::vector<ir::ValueId>& in = st.is_collective ? f.plan.collectives[st.id].inputs
                                                            : f.plan.tasks[st.id].inputs;
      const bool reads = std::any_of(in.begin(), in.end(),
                                     [&](ir::ValueId v) { return depends.contains(v); });
      if (!reads) {
        before.push_back(st);
        continue;
      }
      independent = independent && !st.is_collective;
      after.push_back(st);
      for (ir::ValueId v : f.plan.tasks[st.id].outputs) depends.insert(v);
    }
    if (!independent) continue;
    order.assign(original.begin(), original.begin() + x);
    order.insert(order.end(), before.begin(), before.end());
    order.insert(order.end(), after.begin(), after.end());
    order.insert(order.end(), original.begin() + y + 1, original.end());
    if (LowerPlan(f.spec, f.plan).ok()) {
      first = original[x].id;
      second = original[y].id;
    }
  }
  if (first < 0) order = original;
  ASSERT_GE(first, 0) << "no two collectives of device 0 are independent";
  // The check before a run finds it too.
  auto lowered = LowerPlan(f.spec, f.plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  absl::Status precheck = CheckCollectiveOrder(*lowered);
  EXPECT_THAT(precheck.message(), HasSubstr("different orders")) << precheck;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = RunOnce(f, /*timeout_s=*/30);
  EXPECT_LT(Seconds(start), 10.0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("different orders"));
  EXPECT_THAT(s.message(), HasSubstr("device 0"));
  EXPECT_THAT(s.message(), HasSubstr("device 1"));
  EXPECT_THAT(s.message(), HasSubstr("collective " + std::to_string(first) + " "));
  EXPECT_THAT(s.message(), HasSubstr("collective " + std::to_string(second) + " "));
}

// A device whose program ends before a collective its peer waits at: a deadlock
// reported with the waiting device, its collective and the absent peer.
TEST(CpuBackendTest, MissingPeerIsReported) {
  Fixture f = Ordered(Make(2, 1, 1, 1));
  std::vector<ir::PlanStep>& order = f.plan.order[1];
  auto last = std::find_if(order.rbegin(), order.rend(),
                           [](const ir::PlanStep& s) { return s.is_collective; });
  ASSERT_NE(last, order.rend());
  const int32_t dropped = last->id;
  auto lowered = LowerPlan(f.spec, f.plan);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  Program program = *std::move(lowered);
  // Device 1 stops right before the collective.
  std::vector<Instr>& instrs = program.devices[1].instrs;
  auto at = std::find_if(instrs.begin(), instrs.end(), [&](const Instr& i) {
    return i.kind == InstrKind::kCollective && i.id == dropped;
  });
  ASSERT_NE(at, instrs.end());
  instrs.erase(at, instrs.end());
  absl::Status precheck = CheckCollectiveOrder(program);
  EXPECT_THAT(precheck.message(), HasSubstr("device 1 (finished its program)")) << precheck;
  ExecOptions options;
  options.precision = ir::DType::kF64;
  options.collective_timeout_s = 30;
  std::unique_ptr<Backend> backend = MakeCpuBackend(options);
  ValueStore inputs(program.plan.values.size());
  for (ir::ValueId v : program.inputs) {
    const ir::PlanValue& pv = program.plan.values[v];
    inputs[v] = ir::HostTensor(ir::Shape(ir::BoxDims(pv.sub.box)), pv.dtype);
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<StepResult> r = backend->RunStep(program, std::move(inputs));
  EXPECT_LT(Seconds(start), 10.0);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("deadlock"));
  EXPECT_THAT(r.status().message(), HasSubstr("device 0 waits at collective " +
                                              std::to_string(dropped)));
  EXPECT_THAT(r.status().message(), HasSubstr("device 1 (finished its program)"));
}

// An unknown backend name is an error naming it.
TEST(CpuBackendTest, UnknownBackendIsAnError) {
  auto b = MakeBackend("tpu", ExecOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("unknown backend 'tpu'"));
}

// The lowering frees every buffer after its last reader and keeps plan outputs.
TEST(ProgramTest, FreesAfterLastUseAndKeepsOutputs) {
  Fixture f = Ordered(Make(2, 2, 1, 1));
  auto program = LowerPlan(f.spec, f.plan);
  ASSERT_TRUE(program.ok()) << program.status();
  std::vector<int> freed(program->plan.values.size(), 0);
  for (const DeviceProgram& d : program->devices) {
    EXPECT_GT(d.peak_bytes, d.input_bytes);
    for (const Instr& i : d.instrs) {
      if (i.kind == InstrKind::kFree) ++freed[i.id];
    }
  }
  for (ir::ValueId v : program->plan.outputs) EXPECT_EQ(freed[v], 0) << "output " << v;
  int64_t total = 0;
  for (int n : freed) {
    EXPECT_LE(n, 1);
    total += n;
  }
  EXPECT_GT(total, 0);
}

// An order that reads a value before its device produces it is rejected when
// lowering, naming the step.
TEST(ProgramTest, ReadBeforeProduceIsAnError) {
  Fixture f = Ordered(Make(1, 1, 1, 1));
  std::vector<ir::PlanStep>& order = f.plan.order[0];
  ASSERT_GE(order.size(), 2u);
  std::reverse(order.begin(), order.end());
  auto program = LowerPlan(f.spec, f.plan);
  ASSERT_FALSE(program.ok());
  EXPECT_THAT(program.status().message(), HasSubstr("before device 0's order produces it"));
}

}  // namespace
}  // namespace loom::exec
