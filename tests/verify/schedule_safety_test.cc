#include "verify/schedule_safety.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "schedule/plan_blocks.h"
#include "schedule/predefined.h"
#include "schedule/schedule.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::verify {
namespace {

using ir::CollectiveKind;
using ir::PlanStep;
using ir::ValueId;
using Kind = SafetyIssue::Kind;

PlanStep T(int id) { return {/*is_collective=*/false, id}; }
PlanStep C(int id) { return {/*is_collective=*/true, id}; }

// Builds small explicit plans by hand; the checker reads only devices, value
// sizes and the data flow.
class PlanBuilder {
 public:
  explicit PlanBuilder(int64_t devices) {
    plan_.mesh = ir::Mesh({{"tp", devices}});
    plan_.order.resize(devices);
  }
  ValueId Value(int64_t device, int64_t elements, ir::DType dtype = ir::DType::kF32) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan_.values.size());
    v.device = device;
    v.sub.tensor = 0;
    v.sub.box = {{0, elements}};
    v.dtype = dtype;
    v.microbatch = 0;
    plan_.values.push_back(v);
    return v.id;
  }
  int Task(int64_t device, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
           ir::OpKind kind = ir::OpKind::kAdd, int microbatch = 0) {
    ir::Task t;
    t.id = static_cast<int>(plan_.tasks.size());
    t.kind = kind;
    t.device = device;
    t.info.microbatch = microbatch;
    t.inputs = std::move(inputs);
    t.outputs = std::move(outputs);
    plan_.tasks.push_back(t);
    return t.id;
  }
  int Collective(CollectiveKind kind, std::vector<int64_t> devices, std::vector<ValueId> inputs,
                 std::vector<ValueId> outputs, int microbatch = 0) {
    ir::Collective c;
    c.id = static_cast<int>(plan_.collectives.size());
    c.kind = kind;
    c.devices = std::move(devices);
    c.inputs = std::move(inputs);
    c.outputs = std::move(outputs);
    c.microbatch = microbatch;
    plan_.collectives.push_back(c);
    return c.id;
  }
  void Order(int64_t device, std::vector<PlanStep> steps) {
    plan_.order[device] = std::move(steps);
  }
  void Output(ValueId v) { plan_.outputs.push_back(v); }
  ir::Plan& plan() { return plan_; }

 private:
  ir::Plan plan_;
};

// Two devices: each computes a partial (f64) from its input, all-reduces it and
// computes a small output; device 0 also reads a parameter in its last task.
//   device 0: x0 (10 f32) -t0-> a0 (6 f64) -AR0-> r0 (6 f64) -t2(r0, w0)-> y0 (3 f32)
//   device 1: x1 (10 f32) -t1-> a1 (6 f64) -AR0-> r1 (6 f64) -t3-> y1 (3 f32)
// w0 is 20 f32. Outputs: y0, y1.
ir::Plan AllReducePlan() {
  PlanBuilder b(2);
  const ValueId x0 = b.Value(0, 10), x1 = b.Value(1, 10), w0 = b.Value(0, 20);
  const ValueId a0 = b.Value(0, 6, ir::DType::kF64), a1 = b.Value(1, 6, ir::DType::kF64);
  const ValueId r0 = b.Value(0, 6, ir::DType::kF64), r1 = b.Value(1, 6, ir::DType::kF64);
  const ValueId y0 = b.Value(0, 3), y1 = b.Value(1, 3);
  b.Task(0, {x0}, {a0}, ir::OpKind::kExp);
  b.Task(1, {x1}, {a1}, ir::OpKind::kExp);
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {a0, a1}, {r0, r1});
  b.Task(0, {r0, w0}, {y0}, ir::OpKind::kMul);
  b.Task(1, {r1}, {y1}, ir::OpKind::kExp);
  b.Output(y0);
  b.Output(y1);
  b.Order(0, {T(0), C(0), T(2)});
  b.Order(1, {T(1), C(0), T(3)});
  return b.plan();
}

SafetyReport Check(const ir::Plan& plan, SafetyOptions options = {}) {
  absl::StatusOr<SafetyReport> report = CheckScheduleSafety(plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return {};
  EXPECT_TRUE(report->checked);
  return *std::move(report);
}

std::string Dump(const SafetyReport& report) {
  std::string out;
  for (const SafetyIssue& i : report.issues) {
    out += std::string(SafetyIssueKindName(i.kind)) + ": " + i.message + "\n";
  }
  return out;
}

std::vector<Kind> Kinds(const SafetyReport& report) {
  std::vector<Kind> kinds;
  for (const SafetyIssue& i : report.issues) kinds.push_back(i.kind);
  return kinds;
}

const SafetyIssue* Find(const SafetyReport& report, Kind kind) {
  for (const SafetyIssue& i : report.issues) {
    if (i.kind == kind) return &i;
  }
  return nullptr;
}

// A consistent hand-made plan has no issues; its peaks match a hand count.
TEST(ScheduleSafetyTest, CleanPlanHasNoIssuesAndHandCountedPeaks) {
  SafetyReport report = Check(AllReducePlan());
  EXPECT_TRUE(report.issues.empty()) << Dump(report);
  // Device 0: start x0 + w0 = 40 + 80 = 120; t0 adds a0 (48) -> 168, frees x0 -> 128;
  // AR0 adds r0 (48) -> 176, frees a0 -> 128; t2 adds y0 (12) -> 140.
  // Device 1: start 40; t1 -> 88, then 48; AR0 -> 96, then 48; t3 -> 60.
  EXPECT_EQ(report.peak_bytes, (std::vector<int64_t>{176, 96}));
}

// Plans without an order, or factored ones, are not checked and not an error.
TEST(ScheduleSafetyTest, UnscheduledPlansAreNotChecked) {
  ir::Plan plan = AllReducePlan();
  plan.order.clear();
  absl::StatusOr<SafetyReport> report = CheckScheduleSafety(plan);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->checked);
  EXPECT_TRUE(report->issues.empty());
  plan.order.assign(2, {});
  report = CheckScheduleSafety(plan);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->checked);
  plan = AllReducePlan();
  plan.factoring = ir::Factoring{};
  report = CheckScheduleSafety(plan);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->checked);
}

// A memory cap below the peak is reported for the device above it only; a cap at
// the peak is not.
TEST(ScheduleSafetyTest, ReportsMemoryAboveCapacity) {
  SafetyOptions options;
  options.memory_capacity_bytes = 175;
  SafetyReport report = Check(AllReducePlan(), options);
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kMemory}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, std::vector<int64_t>{0});
  EXPECT_EQ(report.issues[0].message,
            "device 0 holds 176 bytes of live values at all_reduce #0 (micro-batch 0), above "
            "the capacity of 175 bytes");
  options.memory_capacity_bytes = 176;
  EXPECT_TRUE(Check(AllReducePlan(), options).issues.empty());
  options.memory_capacity_bytes = 1 << 20;
  EXPECT_TRUE(Check(AllReducePlan(), options).issues.empty());
}

// Two collectives issued in swapped order by their two members: an order issue for
// the pair and a deadlock whose cycle names both devices.
TEST(ScheduleSafetyTest, SwappedCollectivesAreAnOrderIssueAndADeadlock) {
  PlanBuilder b(2);
  const ValueId x0 = b.Value(0, 4), x1 = b.Value(1, 4);
  const ValueId r0 = b.Value(0, 4), r1 = b.Value(1, 4);
  const ValueId g0 = b.Value(0, 8), g1 = b.Value(1, 8);
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {x0, x1}, {r0, r1});
  b.Collective(CollectiveKind::kAllGather, {0, 1}, {x0, x1}, {g0, g1}, /*microbatch=*/-1);
  b.Order(0, {C(0), C(1)});
  b.Order(1, {C(1), C(0)});
  SafetyReport report = Check(b.plan());
  ASSERT_EQ(Kinds(report), (std::vector<Kind>{Kind::kCollectiveOrder, Kind::kDeadlock}))
      << Dump(report);
  EXPECT_EQ(report.issues[0].devices, (std::vector<int64_t>{0, 1}));
  EXPECT_NE(report.issues[0].message.find("devices 0 and 1 issue all_reduce #0 (micro-batch 0) "
                                          "and all_gather #1 in different orders"),
            std::string::npos)
      << report.issues[0].message;
  EXPECT_EQ(report.issues[1].devices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(report.issues[1].message,
            "the programs deadlock: device 0 waits at all_reduce #0 (micro-batch 0) for device 1; "
            "device 1 waits at all_gather #1 for device 0");
}

// Three pairwise-consistent programs can still wait in a circle: one deadlock
// naming the cycle from its smallest device, and no order issue.
TEST(ScheduleSafetyTest, ReportsThreeDeviceCycleOnce) {
  PlanBuilder b(3);
  std::vector<ValueId> in, out;
  for (int d = 0; d < 3; ++d) in.push_back(b.Value(d, 2));
  for (int i = 0; i < 6; ++i) out.push_back(b.Value(i / 2, 2));
  // A on {0,1}, B on {1,2}, Cc on {2,0}.
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {in[0], in[1]}, {out[0], out[2]});
  b.Collective(CollectiveKind::kAllReduce, {1, 2}, {in[1], in[2]}, {out[3], out[4]});
  b.Collective(CollectiveKind::kAllReduce, {2, 0}, {in[2], in[0]}, {out[5], out[1]});
  b.Order(0, {C(2), C(0)});
  b.Order(1, {C(0), C(1)});
  b.Order(2, {C(1), C(2)});
  SafetyReport report = Check(b.plan());
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kDeadlock}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(report.issues[0].message,
            "the programs deadlock: device 0 waits at all_reduce #2 (micro-batch 0) for device "
            "2; device 2 waits at all_reduce #1 (micro-batch 0) for device 1; device 1 waits at "
            "all_reduce #0 (micro-batch 0) for device 0");
}

// A step listed before the local producer of its input: a dependency issue naming
// both; the device waiting on itself is not reported again as a deadlock.
TEST(ScheduleSafetyTest, ReportsStepBeforeItsLocalProducer) {
  ir::Plan plan = AllReducePlan();
  plan.order[0] = {T(0), T(2), C(0)};
  SafetyReport report = Check(plan);
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kDependency}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, std::vector<int64_t>{0});
  EXPECT_EQ(report.issues[0].message,
            "device 0 runs task #2 'mul' (micro-batch 0) at step 1 before all_reduce #0 "
            "(micro-batch 0) at step 2, which produces its input value 5");
}

// A collective missing from one member's program.
TEST(ScheduleSafetyTest, ReportsCollectiveMissingFromOneMember) {
  ir::Plan plan = AllReducePlan();
  plan.order[1] = {T(1), T(3)};
  SafetyReport report = Check(plan);
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kMissingStep}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, std::vector<int64_t>{1});
  EXPECT_EQ(report.issues[0].message, "device 1 does not list all_reduce #0 (micro-batch 0)");
}

// Tasks on the wrong device and listed twice.
TEST(ScheduleSafetyTest, ReportsWrongDeviceAndDuplicateSteps) {
  ir::Plan plan = AllReducePlan();
  plan.order[0] = {T(0), T(0), C(0), T(2)};
  plan.order[1] = {T(1), C(0), T(3), T(2), C(0)};
  SafetyReport report = Check(plan);
  ASSERT_EQ(Kinds(report),
            (std::vector<Kind>{Kind::kDuplicateStep, Kind::kDuplicateStep, Kind::kWrongDevice}))
      << Dump(report);
  EXPECT_EQ(report.issues[0].message, "device 0 lists task #0 'exp' (micro-batch 0) 2 times");
  EXPECT_EQ(report.issues[1].message, "device 1 lists all_reduce #0 (micro-batch 0) 2 times");
  EXPECT_EQ(report.issues[2].devices, std::vector<int64_t>{1});
  EXPECT_EQ(report.issues[2].message,
            "device 1 lists task #2 'mul' (micro-batch 0) at step 3, which runs on device 0");
}

// A pipeline transfer: a send the receiver never posts, and a receive without its send.
TEST(ScheduleSafetyTest, ReportsUnmatchedSend) {
  PlanBuilder b(2);
  const ValueId x = b.Value(0, 4), a = b.Value(0, 4), r = b.Value(1, 4), y = b.Value(1, 4);
  b.Task(0, {x}, {a});
  b.Collective(CollectiveKind::kSendRecv, {0, 1}, {a}, {r});
  b.Task(1, {r}, {y});
  b.Output(y);
  b.Order(0, {T(0), C(0)});
  b.Order(1, {C(0), T(1)});
  EXPECT_TRUE(Check(b.plan()).issues.empty()) << Dump(Check(b.plan()));
  b.Order(1, {T(1)});
  SafetyReport report = Check(b.plan());
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kUnmatchedSend}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(report.issues[0].message,
            "device 0 sends send_recv #0 (micro-batch 0) to device 1, whose program never "
            "receives it");
  b.Order(0, {T(0)});
  b.Order(1, {C(0), T(1)});
  report = Check(b.plan());
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kMissingStep}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, std::vector<int64_t>{0});
}

// Programs for devices outside the mesh, or missing ones, are issues.
TEST(ScheduleSafetyTest, ReportsProgramsOutsideTheMeshAndMissingPrograms) {
  ir::Plan plan = AllReducePlan();
  plan.order.push_back({T(0)});
  SafetyReport report = Check(plan);
  ASSERT_EQ(Kinds(report), std::vector<Kind>{Kind::kWrongDevice}) << Dump(report);
  EXPECT_EQ(report.issues[0].devices, std::vector<int64_t>{2});
  plan = AllReducePlan();
  plan.order.resize(1);
  report = Check(plan);
  ASSERT_GE(report.issues.size(), 3u) << Dump(report);
  EXPECT_EQ(report.issues[0].message,
            "the order has programs for 1 of 2 devices: none for device 1");
  for (const SafetyIssue& i : report.issues) {
    EXPECT_EQ(i.kind, Kind::kMissingStep) << i.message;
    EXPECT_EQ(i.devices, std::vector<int64_t>{1});
  }
}

// Malformed plans are errors naming the item, never crashes.
TEST(ScheduleSafetyTest, RejectsMalformedPlans) {
  auto expect_error = [](const ir::Plan& plan, const std::string& text,
                         SafetyOptions options = {}) {
    absl::StatusOr<SafetyReport> report = CheckScheduleSafety(plan, options);
    ASSERT_FALSE(report.ok()) << text;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find(text), std::string::npos) << report.status();
  };
  ir::Plan plan = AllReducePlan();
  plan.order[1].push_back(T(99));
  expect_error(plan, "order of device 1, step 3: unknown task 99 (the plan has 4)");
  plan = AllReducePlan();
  plan.order[0].push_back(C(-1));
  expect_error(plan, "unknown collective -1");
  plan = AllReducePlan();
  plan.tasks[2].inputs.push_back(1000);
  expect_error(plan, "task #2 'mul' (micro-batch 0): unknown input value 1000");
  plan = AllReducePlan();
  plan.collectives[0].devices[1] = 7;
  expect_error(plan, "all_reduce #0 (micro-batch 0): device 7 outside the mesh");
  plan = AllReducePlan();
  plan.collectives[0].devices[1] = 0;
  expect_error(plan, "device 0 appears twice");
  plan = AllReducePlan();
  plan.tasks[3].outputs = {plan.tasks[2].outputs[0]};
  expect_error(plan, "is also written by");
  plan = AllReducePlan();
  plan.values[0].device = -3;
  expect_error(plan, "value 0: device -3 outside the mesh");
  plan = AllReducePlan();
  plan.collectives[0].inputs.push_back(0);
  expect_error(plan, "3 inputs for a group of 2 devices");
  SafetyOptions negative;
  negative.memory_capacity_bytes = -1;
  expect_error(AllReducePlan(), "memory capacity -1 is negative", negative);
}

// Many issues of one kind on one device are detailed up to a limit, then counted.
TEST(ScheduleSafetyTest, SummarisesManyIssuesPerDevice) {
  PlanBuilder b(1);
  for (int i = 0; i < 30; ++i) b.Task(0, {}, {b.Value(0, 1)});
  b.Order(0, {T(0)});
  SafetyReport report = Check(b.plan());
  ASSERT_EQ(report.issues.size(), static_cast<size_t>(kMaxIssuesPerDevice + 1)) << Dump(report);
  EXPECT_EQ(report.issues.back().message, "device 0: 9 more missing_step issues");
}

// ---------------------------------------------------------------------------
// Real plans: a tiny model parallelised over pp2 x tp2, scheduled with 1F1B.

struct Scheduled {
  ir::Graph spec;
  ir::Plan plan;
};

Scheduled ScheduledPlan(const std::string& model, const transform::Strategy& st, int layers,
                        int64_t batch = 2) {
  Scheduled out;
  out.spec = ::loom::testing::TinyStep(model, st.microbatches, layers, batch);
  auto plan = transform::Parallelize(out.spec, st);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return out;
  auto blocks = schedule::BlocksFromPlan(out.spec, *plan);
  EXPECT_TRUE(blocks.ok()) << blocks.status();
  if (!blocks.ok()) return out;
  auto sched = schedule::MakePredefinedSchedule("1f1b", blocks->model, st.microbatches);
  EXPECT_TRUE(sched.ok()) << sched.status();
  if (!sched.ok()) return out;
  auto ordered = schedule::ApplySchedule(*plan, *blocks, *sched);
  EXPECT_TRUE(ordered.ok()) << ordered.status();
  if (ordered.ok()) out.plan = *std::move(ordered);
  return out;
}

transform::Strategy PpTp(int tp, int pp, int microbatches, int dp = 1, bool recompute = false) {
  transform::Strategy s;
  s.dp = dp;
  s.recompute = recompute;
  s.tp = tp;
  s.pp = pp;
  s.microbatches = microbatches;
  return s;
}

// Plans scheduled by the scheduler are safe: no issues, and a peak per device.
TEST(ScheduleSafetyTest, ScheduledModelPlanIsSafe) {
  struct Case {
    std::string model;
    transform::Strategy strategy;
    int64_t batch;
  };
  const std::vector<Case> cases = {
      {"llama3-8b", PpTp(/*tp=*/2, /*pp=*/2, /*microbatches=*/4), 2},
      {"gpt2", PpTp(/*tp=*/2, /*pp=*/2, /*microbatches=*/4), 2},
      {"llama3-8b", PpTp(/*tp=*/2, /*pp=*/2, /*microbatches=*/2, /*dp=*/2, /*recompute=*/true), 4},
  };
  for (const Case& c : cases) {
    const std::string name = c.model + " " + c.strategy.ToString();
    Scheduled s = ScheduledPlan(c.model, c.strategy, /*layers=*/2, c.batch);
    ASSERT_FALSE(s.plan.order.empty()) << name;
    ASSERT_TRUE(schedule::CheckPlanOrder(s.plan).ok()) << schedule::CheckPlanOrder(s.plan);
    SafetyReport report = Check(s.plan);
    EXPECT_TRUE(report.issues.empty()) << name << "\n" << Dump(report);
    ASSERT_EQ(static_cast<int64_t>(report.peak_bytes.size()), s.plan.mesh.num_devices());
    for (int64_t peak : report.peak_bytes) EXPECT_GT(peak, 0) << name;
  }
}

// Mutations of a scheduled plan are reported with the right kind and devices.
TEST(ScheduleSafetyTest, MutatedModelPlanIsReported) {
  Scheduled s = ScheduledPlan("llama3-8b", PpTp(2, 2, 4), /*layers=*/2);
  ASSERT_FALSE(s.plan.order.empty());
  const ir::Plan& plan = s.plan;
  SafetyReport clean = Check(plan);
  ASSERT_TRUE(clean.issues.empty()) << Dump(clean);

  // Swap two collectives of one group in one member's program, the later one's
  // inputs there being produced before the earlier one.
  bool swapped = false;
  for (int64_t d = 0; d < plan.mesh.num_devices() && !swapped; ++d) {
    const std::vector<PlanStep>& order = plan.order[d];
    std::vector<int> producer(plan.values.size(), -1);  // position on d
    for (size_t i = 0; i < order.size(); ++i) {
      const std::vector<ValueId>& outs = order[i].is_collective
                                             ? plan.collectives[order[i].id].outputs
                                             : plan.tasks[order[i].id].outputs;
      for (ValueId v : outs) producer[v] = static_cast<int>(i);
    }
    for (size_t j = 0; j < order.size() && !swapped; ++j) {
      if (!order[j].is_collective) continue;
      const ir::Collective& c = plan.collectives[order[j].id];
      if (c.devices.size() < 2) continue;
      int ready = -1;
      for (ValueId v : c.inputs) {
        if (plan.values[v].device == d) ready = std::max(ready, producer[v]);
      }
      for (size_t i = ready + 1; i < j; ++i) {
        if (!order[i].is_collective || plan.collectives[order[i].id].devices != c.devices) continue;
        ir::Plan mutated = plan;
        std::swap(mutated.order[d][i], mutated.order[d][j]);
        SafetyReport report = Check(mutated);
        const SafetyIssue* order_issue = Find(report, Kind::kCollectiveOrder);
        const SafetyIssue* deadlock = Find(report, Kind::kDeadlock);
        ASSERT_NE(order_issue, nullptr) << Dump(report);
        ASSERT_NE(deadlock, nullptr) << Dump(report);
        EXPECT_NE(std::find(order_issue->devices.begin(), order_issue->devices.end(), d),
                  order_issue->devices.end());
        EXPECT_NE(std::find(deadlock->devices.begin(), deadlock->devices.end(), d),
                  deadlock->devices.end())
            << deadlock->message;
        EXPECT_GE(deadlock->devices.size(), 2u);
        swapped = true;
        break;
      }
    }
  }
  EXPECT_TRUE(swapped) << "no two collectives of one group to swap";

  // Drop the first send_recv from its receiver's program.
  bool dropped = false;
  for (size_t c = 0; c < plan.collectives.size(); ++c) {
    if (plan.collectives[c].kind != CollectiveKind::kSendRecv) continue;
    ir::Plan mutated = plan;
    const int64_t dst = plan.collectives[c].devices[1];
    std::vector<PlanStep>& order = mutated.order[dst];
    order.erase(std::find(order.begin(), order.end(), C(static_cast<int>(c))));
    SafetyReport report = Check(mutated);
    const SafetyIssue* issue = Find(report, Kind::kUnmatchedSend);
    ASSERT_NE(issue, nullptr) << Dump(report);
    EXPECT_EQ(issue->devices, (std::vector<int64_t>{plan.collectives[c].devices[0], dst}));
    dropped = true;
    break;
  }
  EXPECT_TRUE(dropped) << "no send_recv";

  // Move a task to the front of its program: it now precedes its local producers.
  bool moved = false;
  for (int64_t d = 0; d < plan.mesh.num_devices(); ++d) {
    const std::vector<PlanStep>& order = plan.order[d];
    auto it = std::find_if(order.begin() + 1, order.end(), [&](const PlanStep& p) {
      return !p.is_collective && !plan.tasks[p.id].inputs.empty() &&
             plan.tasks[p.id].kind == ir::OpKind::kLinear;
    });
    if (it == order.end()) continue;
    ir::Plan mutated = plan;
    std::vector<PlanStep>& m = mutated.order[d];
    const PlanStep step = *it;
    m.erase(m.begin() + (it - order.begin()));
    m.insert(m.begin(), step);
    SafetyReport report = Check(mutated);
    const SafetyIssue* issue = Find(report, Kind::kDependency);
    ASSERT_NE(issue, nullptr) << Dump(report);
    EXPECT_EQ(issue->devices, std::vector<int64_t>{d});
    moved = true;
    break;
  }
  EXPECT_TRUE(moved) << "no linear task";

  // A memory cap below the largest peak flags exactly the devices above it.
  const int64_t top = *std::max_element(clean.peak_bytes.begin(), clean.peak_bytes.end());
  SafetyOptions options;
  options.memory_capacity_bytes = top - 1;
  SafetyReport report = Check(plan, options);
  ASSERT_FALSE(report.issues.empty());
  for (const SafetyIssue& i : report.issues) {
    EXPECT_EQ(i.kind, Kind::kMemory) << i.message;
    EXPECT_EQ(clean.peak_bytes[i.devices[0]], top);
  }
  options.memory_capacity_bytes = top;
  EXPECT_TRUE(Check(plan, options).issues.empty());
}

// A factored plan's order is checked on its scale unit: the same verdict and the
// same peaks as its expansion over every replica, and a broken unit program is
// reported, naming the factored item and its micro-batch copy.
TEST(ScheduleSafetyTest, FactoredOrderIsCheckedOnItsScaleUnit) {
  transform::Strategy st = PpTp(/*tp=*/2, /*pp=*/2, /*microbatches=*/3, /*dp=*/2,
                                /*recompute=*/true);
  st.factored = true;
  Scheduled s = ScheduledPlan("llama3-8b", st, /*layers=*/2, /*batch=*/4);
  ASSERT_TRUE(s.plan.is_factored());
  ASSERT_FALSE(s.plan.factored_order.empty());
  absl::StatusOr<SafetyReport> unit = CheckScheduleSafety(s.spec, s.plan);
  ASSERT_TRUE(unit.ok()) << unit.status();
  EXPECT_TRUE(unit->checked);
  EXPECT_EQ(unit->replicas, 2);
  EXPECT_TRUE(unit->issues.empty()) << Dump(*unit);
  auto expanded = ir::ExpandPlan(s.spec, s.plan);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  absl::StatusOr<SafetyReport> whole = CheckScheduleSafety(s.spec, *expanded);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->issues.empty()) << Dump(*whole);
  EXPECT_EQ(unit->peak_bytes, whole->peak_bytes);
  ASSERT_EQ(unit->peak_by_role.size(), whole->peak_by_role.size());
  for (size_t d = 0; d < unit->peak_by_role.size(); ++d) {
    EXPECT_EQ(unit->peak_by_role[d].weights, whole->peak_by_role[d].weights) << d;
    EXPECT_EQ(unit->peak_by_role[d].activations, whole->peak_by_role[d].activations) << d;
    const MemoryByRole& m = unit->peak_by_role[d];
    EXPECT_EQ(m.weights + m.gradients + m.optimizer_states + m.activations + m.communication,
              unit->peak_bytes[d])
        << d;
    EXPECT_GT(m.weights, 0) << d;
  }

  // Empty runs change nothing, at the start of a program or inside it.
  ir::Plan with_empty = s.plan;
  with_empty.factored_order.segments.push_back({});
  const int32_t empty = static_cast<int32_t>(with_empty.factored_order.segments.size() - 1);
  std::vector<ir::OrderRun>& first = with_empty.factored_order.programs[0];
  first.insert(first.begin(), ir::OrderRun{empty, -1});
  std::vector<ir::OrderRun>& second = with_empty.factored_order.programs[1];
  second.insert(second.begin() + static_cast<int64_t>(second.size() / 2), ir::OrderRun{empty, 0});
  absl::StatusOr<SafetyReport> same = CheckScheduleSafety(s.spec, with_empty);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->issues.empty()) << Dump(*same);
  EXPECT_EQ(same->peak_bytes, unit->peak_bytes);

  // Move a linear task of a later micro-batch to the front of device 0's program.
  ir::Plan mutated = s.plan;
  std::vector<std::vector<PlanStep>> programs;
  for (size_t d = 0; d < s.plan.factored_order.programs.size(); ++d) {
    programs.push_back(s.plan.factored_order.Program(d));
  }
  std::vector<PlanStep>& program = programs[0];
  auto it = std::find_if(program.begin() + 1, program.end(), [&](const PlanStep& p) {
    return !p.is_collective && p.microbatch == 2 &&
           s.plan.tasks[p.id].kind == ir::OpKind::kLinear;
  });
  ASSERT_NE(it, program.end());
  const PlanStep moved = *it;
  program.erase(it);
  program.insert(program.begin(), moved);
  mutated.factored_order = ir::FactoredOrder::FromPrograms(programs);
  absl::StatusOr<SafetyReport> broken = CheckScheduleSafety(s.spec, mutated);
  ASSERT_TRUE(broken.ok()) << broken.status();
  const SafetyIssue* issue = Find(*broken, Kind::kDependency);
  ASSERT_NE(issue, nullptr) << Dump(*broken);
  EXPECT_EQ(issue->devices, std::vector<int64_t>{0});
  EXPECT_NE(issue->message.find(absl::StrCat("task #", moved.id, " 'linear' (micro-batch 2)")),
            std::string::npos)
      << issue->message;
  auto broken_whole = ir::ExpandPlan(s.spec, mutated);
  ASSERT_TRUE(broken_whole.ok());
  absl::StatusOr<SafetyReport> whole_issues = CheckScheduleSafety(s.spec, *broken_whole);
  ASSERT_TRUE(whole_issues.ok());
  EXPECT_NE(Find(*whole_issues, Kind::kDependency), nullptr) << Dump(*whole_issues);
}

// Gradient accumulation over micro-batches is counted as a running sum: the sum
// is held from the first copy on, and each copy is released once its other
// readers are done, not kept for the sum.
TEST(ScheduleSafetyTest, AccumulationFoldsEachCopyAsItArrives) {
  // One device: g0 and g1 (each 10 f32, micro-batches 0 and 1) made by two
  // tasks, summed into s (10 f32) by an accumulate outside the micro-batches.
  PlanBuilder b(1);
  const ValueId x = b.Value(0, 1);
  const ValueId g0 = b.Value(0, 10), g1 = b.Value(0, 10);
  ir::PlanValue& second = b.plan().values[g1];
  second.microbatch = 1;
  const ValueId sum = b.Value(0, 10);
  b.plan().values[sum].microbatch = -1;
  b.Task(0, {x}, {g0}, ir::OpKind::kExp, 0);
  b.Task(0, {x}, {g1}, ir::OpKind::kExp, 1);
  b.Task(0, {g0, g1}, {sum}, ir::OpKind::kAccumulate, -1);
  b.Output(sum);
  b.Order(0, {T(0), T(1), T(2)});
  SafetyReport folded = Check(b.plan());
  EXPECT_TRUE(folded.issues.empty()) << Dump(folded);
  // x 4; t0: + g0 40 + s 40 = 84, g0 folded -> 44; t1: + g1 -> 84, folded -> 44.
  EXPECT_EQ(folded.peak_bytes, std::vector<int64_t>{84});
  // A plain sum of the same copies holds them all: g0 + g1 + s = 120 (x freed).
  b.plan().tasks[2].kind = ir::OpKind::kAdd;
  SafetyReport plain = Check(b.plan());
  EXPECT_EQ(plain.peak_bytes, std::vector<int64_t>{120});
}

// A plan with about a million steps checks in seconds: 8 devices, each a chain of
// tasks with an all-reduce over all devices after every 7 tasks.
TEST(ScheduleSafetyTest, LargePlanChecksQuickly) {
  constexpr int kDevices = 8;
  constexpr int kRounds = 15'000;
  PlanBuilder b(kDevices);
  std::vector<std::vector<PlanStep>> orders(kDevices);
  std::vector<ValueId> last(kDevices);
  for (int d = 0; d < kDevices; ++d) last[d] = b.Value(d, 16);
  std::vector<int64_t> group;
  for (int d = 0; d < kDevices; ++d) group.push_back(d);
  for (int round = 0; round < kRounds; ++round) {
    for (int d = 0; d < kDevices; ++d) {
      for (int k = 0; k < 7; ++k) {
        const ValueId out = b.Value(d, 16);
        orders[d].push_back(T(b.Task(d, {last[d]}, {out})));
        last[d] = out;
      }
    }
    std::vector<ValueId> outs;
    for (int d = 0; d < kDevices; ++d) outs.push_back(b.Value(d, 16));
    const int c = b.Collective(CollectiveKind::kAllReduce, group, last, outs);
    for (int d = 0; d < kDevices; ++d) {
      orders[d].push_back(C(c));
      last[d] = outs[d];
    }
  }
  for (int d = 0; d < kDevices; ++d) b.Order(d, std::move(orders[d]));
  const auto start = std::chrono::steady_clock::now();
  SafetyReport report = Check(b.plan());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(report.issues.empty()) << Dump(report);
  EXPECT_EQ(report.peak_bytes, std::vector<int64_t>(kDevices, 128));
  EXPECT_LT(seconds, 30.0);  // quadratic behaviour would take minutes
  std::printf("checked %zu tasks and %zu collectives in %.2f s\n", b.plan().tasks.size(),
              b.plan().collectives.size(), seconds);
}

}  // namespace
}  // namespace loom::verify
