#include "schedule/plan_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exec/plan_interpreter.h"
#include "gtest/gtest.h"
#include "tests/testing/tiny_step.h"
#include "ir/autodiff.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "models/models.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"
#include "transform/parallelize.h"

namespace loom::schedule {
namespace {

using ::loom::testing::TinyStep;

transform::Strategy Make(int dp, int tp, int pp, int mb, int vpp = 1, bool recompute = false) {
  transform::Strategy s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.vpp = vpp;
  s.microbatches = mb;
  s.recompute = recompute;
  return s;
}

// The 1F1B-like steady state: micro-batch m's block b nominally starts at
// head[b] + m * (the busiest rank's work per micro-batch).
Schedule OneFOneB(const BlockModel& model, int microbatches) {
  auto facts = AnalyzeBlockModel(model);
  EXPECT_TRUE(facts.ok()) << facts.status();
  std::vector<int64_t> start;
  for (int m = 0; m < microbatches; ++m) {
    for (int b = 0; b < model.num_blocks(); ++b) {
      start.push_back(facts->head[b] + m * facts->max_work);
    }
  }
  Schedule s = ScheduleFromTimes(model, microbatches, start);
  s.name = "1f1b";
  return s;
}

// All forwards, then all backwards (GPipe).
Schedule AllForwardFirst(const BlockModel& model, int microbatches) {
  std::vector<int64_t> start;
  for (int m = 0; m < microbatches; ++m) {
    for (int b = 0; b < model.num_blocks(); ++b) {
      const bool forward = model.blocks[b].kind == BlockKind::kForward;
      start.push_back((forward ? 0 : 1'000'000) + m + b);
    }
  }
  Schedule s = ScheduleFromTimes(model, microbatches, start);
  s.name = "gpipe";
  return s;
}

// Checks that each device's tasks run the schedule's block instances in its
// order, with the tasks outside the blocks before and after them.
void ExpectOrderFollowsSchedule(const ir::Plan& ordered, const PlanBlocks& blocks,
                                const Schedule& schedule) {
  const int pp_axis = ordered.mesh.AxisIndex("pp");
  for (int64_t d = 0; d < ordered.mesh.num_devices(); ++d) {
    const int rank = pp_axis < 0 ? 0 : static_cast<int>(ordered.mesh.Coordinates(d)[pp_axis]);
    std::vector<Instance> seen;
    int phase = 0;  // 0 before the blocks, 1 in them, 2 after
    for (const ir::PlanStep& step : ordered.order[d]) {
      if (step.is_collective) continue;
      const int b = blocks.task_block[step.id];
      const int want = b == kBeforeBlocks ? 0 : b == kAfterBlocks ? 2 : 1;
      ASSERT_GE(want, phase) << "device " << d << ": task " << step.id << " out of place";
      phase = want;
      if (b < 0) continue;
      Instance inst{b, ordered.tasks[step.id].info.microbatch};
      if (seen.empty() || !(seen.back() == inst)) seen.push_back(inst);
    }
    EXPECT_EQ(seen, schedule.order[rank]) << "device " << d;
  }
}

struct Case {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  int layers = 2;
  int64_t batch = 2;
};

std::vector<Case> Cases() {
  return {
      {"llama3_pp2", "llama3-8b", Make(1, 1, 2, 2)},
      {"llama3_pp4", "llama3-8b", Make(1, 1, 4, 4), 4},
      {"gpt2_pp2", "gpt2", Make(1, 1, 2, 3)},
      {"gpt2_pp4", "gpt2", Make(1, 1, 4, 4), 4},
      {"llama3_pp2_vpp2", "llama3-8b", Make(1, 1, 2, 4, 2), 4},
      {"gpt2_pp2_vpp2", "gpt2", Make(1, 1, 2, 2, 2), 4},
      {"llama3_dp2_tp2_pp2", "llama3-8b", Make(2, 2, 2, 2), 2, 4},
      {"gpt2_dp2_tp2_pp2", "gpt2", Make(2, 2, 2, 2), 2, 4},
      {"llama3_tp2_pp2_recompute", "llama3-8b", Make(1, 2, 2, 2, 1, true)},
      {"gpt2_dp2_tp2_pp4_recompute", "gpt2", Make(2, 2, 4, 4, 1, true), 4, 4},
  };
}

class PlanBlocksMatrixTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    spec_ = TinyStep(c.model, c.strategy.microbatches, c.layers, c.batch);
    auto plan = transform::Parallelize(spec_, c.strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
    CostModel cost;
    cost.bytes_per_memory_unit = 1024;
    auto blocks = BlocksFromPlan(spec_, plan_, cost);
    ASSERT_TRUE(blocks.ok()) << blocks.status();
    blocks_ = *std::move(blocks);
  }

  ir::Graph spec_;
  ir::Plan plan_;
  PlanBlocks blocks_;
};

// One forward and one backward block per virtual stage, on the stage's pipeline
// rank, chained F0 -> F1 -> ... -> B_last -> ... -> B0 with each B<s> after F<s>;
// transfers between ranks carry a lag, the forward keeps what the backward frees.
TEST_P(PlanBlocksMatrixTest, BuildsOneForwardAndBackwardBlockPerStage) {
  const transform::Strategy& st = GetParam().strategy;
  const int stages = st.pp * st.vpp;
  const BlockModel& model = blocks_.model;
  ASSERT_TRUE(ValidateBlockModel(model).ok()) << ValidateBlockModel(model);
  EXPECT_EQ(model.num_devices, st.pp);
  EXPECT_EQ(blocks_.microbatches, st.microbatches);
  ASSERT_EQ(model.num_blocks(), 2 * stages) << BlockModelToJson(model);
  auto preds_of = [&](const std::string& of) -> std::vector<std::string> {
    std::vector<std::string> names;
    for (const Dep& d : model.blocks[model.Find(of)].preds)
      names.push_back(model.blocks[d.block].name);
    return names;
  };
  for (int s = 0; s < stages; ++s) {
    const Block& f = model.blocks[s];
    const Block& b = model.blocks[2 * stages - 1 - s];
    EXPECT_EQ(f.name, absl::StrCat("F", s));
    EXPECT_EQ(b.name, absl::StrCat("B", s));
    EXPECT_EQ(f.devices, std::vector<int>{s % st.pp});
    EXPECT_EQ(b.devices, std::vector<int>{s % st.pp});
    EXPECT_GE(f.span, 1);
    EXPECT_GT(b.span, f.span / 2) << b.name;
    EXPECT_GT(f.memory, 0) << f.name;
    EXPECT_EQ(b.memory, -f.memory) << b.name;
    EXPECT_GT(blocks_.costs[s].flops, 0);
    const std::string fs = absl::StrCat("F", s), bs = absl::StrCat("B", s);
    if (s == 0) {
      EXPECT_TRUE(f.preds.empty());
    } else {
      EXPECT_EQ(preds_of(fs), std::vector<std::string>{absl::StrCat("F", s - 1)});
      EXPECT_GT(f.preds[0].lag, 0) << fs;
    }
    if (s == stages - 1) {
      EXPECT_EQ(preds_of(bs), std::vector<std::string>{fs});
    } else {
      EXPECT_EQ(preds_of(bs), (std::vector<std::string>{fs, absl::StrCat("B", s + 1)}));
    }
  }
}

// A 1F1B order written back into the plan: a valid plan whose programs run the
// schedule's block instances in order, issue collectives consistently and still
// compute the reference step (the interpreter follows `order`).
TEST_P(PlanBlocksMatrixTest, ScheduledPlanRunsInScheduleOrder) {
  Schedule schedule = OneFOneB(blocks_.model, blocks_.microbatches);
  auto sim = Simulate(blocks_.model, schedule);
  ASSERT_TRUE(sim.ok() && sim->valid) << (sim.ok() ? sim->violation : sim.status().ToString());
  auto ordered = ApplySchedule(plan_, blocks_, schedule);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_EQ(ordered->order.size(), static_cast<size_t>(plan_.mesh.num_devices()));
  EXPECT_TRUE(ir::ValidatePlan(spec_, *ordered).ok()) << ir::ValidatePlan(spec_, *ordered);
  EXPECT_TRUE(CheckPlanOrder(*ordered).ok()) << CheckPlanOrder(*ordered);
  ExpectOrderFollowsSchedule(*ordered, blocks_, schedule);
  auto report = exec::CheckPlanNumerics(spec_, *ordered, /*seed=*/7);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->values_checked, 0);
  EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
}

INSTANTIATE_TEST_SUITE_P(Strategies, PlanBlocksMatrixTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

struct Made {
  ir::Graph spec;
  ir::Plan plan;
  PlanBlocks blocks;
};

Made MakeBlocks(const std::string& model, const transform::Strategy& st, int layers,
                int64_t batch = 2, CostModel cost = {}) {
  Made m;
  m.spec = TinyStep(model, st.microbatches, layers, batch);
  auto plan = transform::Parallelize(m.spec, st);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (plan.ok()) m.plan = *std::move(plan);
  auto blocks = BlocksFromPlan(m.spec, m.plan, cost);
  EXPECT_TRUE(blocks.ok()) << blocks.status();
  if (blocks.ok()) m.blocks = *std::move(blocks);
  return m;
}

// Tiny llama3 over pp4 under the default cost model: spans are FLOPs over the
// device speed in units of 1/100 of the longest block (B3: the head and loss
// backward), transfers dwarf them; memory rounds up to 1 MiB.
TEST(PlanBlocksTest, Llama3Pp4SpansAndMemory) {
  Made m = MakeBlocks("llama3-8b", Make(1, 1, 4, 4), 4);
  const BlockModel& model = m.blocks.model;
  ASSERT_EQ(model.num_blocks(), 8);
  std::vector<int64_t> spans, memory;
  for (const Block& b : model.blocks) {
    spans.push_back(b.span);
    memory.push_back(b.memory);
  }
  // F0 F1 F2 F3 B3 B2 B1 B0.
  EXPECT_EQ(spans, (std::vector<int64_t>{35, 35, 35, 51, 100, 70, 70, 70}));
  EXPECT_EQ(memory, (std::vector<int64_t>{1, 1, 1, 1, -1, -1, -1, -1}));
  const CostModel defaults;
  EXPECT_DOUBLE_EQ(m.blocks.seconds_per_unit, m.blocks.costs[4].seconds / 100);
  EXPECT_DOUBLE_EQ(m.blocks.costs[4].seconds, m.blocks.costs[4].flops / defaults.flops_per_second);
  // Attention keeps its output and log-sum-exp for its backward (flash attention's).
  EXPECT_EQ(m.blocks.costs[0].saved_bytes, 58368);
  EXPECT_EQ(m.blocks.costs[3].saved_bytes, 83072);
  // The send between ranks: 10 us of latency plus the bytes, in these tiny units.
  EXPECT_GT(model.blocks[1].preds[0].lag, 100 * model.blocks[4].span);
  // A given time unit is used as is.
  CostModel slow;
  slow.seconds_per_unit = 1e-10;
  Made s = MakeBlocks("llama3-8b", Make(1, 1, 4, 4), 4, 2, slow);
  EXPECT_EQ(s.blocks.model.blocks[0].span, std::llround(m.blocks.costs[0].seconds / 1e-10));
}

// A tiny model's blocks are microseconds beside a link's latency: the time unit is
// made coarser so that the lags stay within the block model's bound (they were
// refused as out of range), and the compute blocks still take at least one unit.
TEST(PlanBlocksTest, LagsOfATinyModelStayWithinTheBound) {
  Made m = MakeBlocks("mlp", Make(1, 1, 2, 2), 2);
  const BlockModel& model = m.blocks.model;
  ASSERT_EQ(model.num_blocks(), 4);
  int64_t longest_lag = 0;
  for (const Block& b : model.blocks) {
    EXPECT_GE(b.span, 1);
    for (const Dep& p : b.preds) longest_lag = std::max(longest_lag, p.lag);
  }
  EXPECT_GT(longest_lag, 1000);
  EXPECT_LE(longest_lag, kMaxSpan);
  EXPECT_TRUE(ValidateBlockModel(model).ok());
}

// Recomputation moves forward work into the backward blocks and keeps less.
TEST(PlanBlocksTest, RecomputeShrinksMemoryAndGrowsBackward) {
  CostModel cost;
  cost.bytes_per_memory_unit = 1;
  Made plain = MakeBlocks("llama3-8b", Make(1, 2, 2, 2), 2, 2, cost);
  Made re = MakeBlocks("llama3-8b", Make(1, 2, 2, 2, 1, true), 2, 2, cost);
  for (int b = 0; b < 4; ++b) {
    const Block& p = plain.blocks.model.blocks[b];
    const Block& r = re.blocks.model.blocks[b];
    ASSERT_EQ(p.name, r.name);
    if (p.kind == BlockKind::kForward) {
      EXPECT_LT(r.memory, p.memory) << p.name;
      EXPECT_DOUBLE_EQ(re.blocks.costs[b].flops, plain.blocks.costs[b].flops) << p.name;
    } else {
      EXPECT_GT(re.blocks.costs[b].flops, plain.blocks.costs[b].flops) << p.name;
    }
  }
  int recomputed = 0;
  for (const ir::Task& t : re.plan.tasks) {
    if (!t.recompute) continue;
    ++recomputed;
    const int b = re.blocks.task_block[t.id];
    ASSERT_GE(b, 0);
    EXPECT_EQ(re.blocks.model.blocks[b].kind, BlockKind::kBackward) << "task " << t.id;
  }
  EXPECT_GT(recomputed, 0);
}

// Tasks without a micro-batch (accumulation, optimizer) run after the blocks; the
// per-micro-batch sum of a tied embedding's two gradients (read from B0 on the
// last stage) joins them.
TEST(PlanBlocksTest, UntaggedAndTiedGradientSumRunAfterBlocks) {
  Made m = MakeBlocks("gpt2", Make(1, 1, 2, 2), 2);
  int untagged = 0, tagged_after = 0;
  for (const ir::Task& t : m.plan.tasks) {
    const int b = m.blocks.task_block[t.id];
    if (t.info.microbatch < 0) {
      ++untagged;
      EXPECT_TRUE(b == kAfterBlocks || b == kBeforeBlocks) << "task " << t.id;
      if (t.info.phase == ir::Phase::kOptimizer) {
        EXPECT_EQ(b, kAfterBlocks);
      }
    } else if (b == kAfterBlocks) {
      ++tagged_after;
      EXPECT_EQ(t.info.phase, ir::Phase::kBackward);
    }
  }
  EXPECT_GT(untagged, 0);
  EXPECT_EQ(tagged_after, m.blocks.microbatches);  // one sum per micro-batch
  int transfers = 0;
  for (const ir::Collective& c : m.plan.collectives) {
    transfers += m.blocks.collective_block[c.id] == kBetweenRanks;
  }
  EXPECT_GT(transfers, 0);
}

// Another order (all forwards first) also gives a runnable, correct plan.
TEST(PlanBlocksTest, AllForwardFirstOrderRuns) {
  Made m = MakeBlocks("llama3-8b", Make(2, 2, 2, 3), 2, 4);
  Schedule schedule = AllForwardFirst(m.blocks.model, 3);
  auto ordered = ApplySchedule(m.plan, m.blocks, schedule);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_TRUE(ir::ValidatePlan(m.spec, *ordered).ok()) << ir::ValidatePlan(m.spec, *ordered);
  EXPECT_TRUE(CheckPlanOrder(*ordered).ok()) << CheckPlanOrder(*ordered);
  ExpectOrderFollowsSchedule(*ordered, m.blocks, schedule);
  auto report = exec::CheckPlanNumerics(m.spec, *ordered, /*seed=*/3);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
}

// A factored plan gives the same blocks as its explicit form and stays factored
// when ordered: one program per scale-unit device, each step an item and its
// micro-batch copy, which every replica runs. Expanded, the order is a valid,
// runnable explicit order that follows the schedule and computes the step.
TEST(PlanBlocksTest, FactoredPlanKeepsItsFactoringWhenOrdered) {
  transform::Strategy st = Make(2, 2, 2, 3);
  Made m = MakeBlocks("llama3-8b", st, 2, 4);
  st.factored = true;
  auto factored = transform::Parallelize(m.spec, st);
  ASSERT_TRUE(factored.ok()) << factored.status();
  ASSERT_TRUE(factored->is_factored());
  auto blocks = BlocksFromPlan(m.spec, *factored);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(blocks->model, m.blocks.model) << BlockModelToJson(blocks->model);
  Schedule schedule = OneFOneB(blocks->model, 3);
  auto ordered = ApplySchedule(*factored, *blocks, schedule);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_TRUE(ordered->is_factored());
  const int64_t unit = ordered->factoring->dp_device_stride;
  EXPECT_TRUE(ordered->order.empty());
  ASSERT_EQ(static_cast<int64_t>(ordered->factored_order.programs.size()), unit);
  EXPECT_TRUE(ir::ValidatePlan(m.spec, *ordered).ok()) << ir::ValidatePlan(m.spec, *ordered);
  // Each block's steps on a device are stated once and run for every micro-batch.
  int repeated_runs = 0;
  for (const std::vector<ir::OrderRun>& program : ordered->factored_order.programs) {
    for (const ir::OrderRun& run : program) repeated_runs += run.microbatch > 0;
  }
  EXPECT_GT(repeated_runs, 0);
  EXPECT_LT(ordered->factored_order.segments.size(),
            static_cast<size_t>(ordered->factored_order.num_steps()) / 3);

  // JSON keeps it exactly; the order is written once per distinct run of steps.
  const std::string text = ir::PlanToJson(*ordered);
  auto back = ir::PlanFromJson(text, "ordered.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *ordered);
  ir::Plan unordered = *ordered;
  unordered.factored_order = {};
  EXPECT_LT(text.size(), ir::PlanToJson(unordered).size() * 3 / 2);

  auto expanded = ir::ExpandPlan(m.spec, *ordered);
  ASSERT_TRUE(expanded.ok()) << expanded.status();
  ASSERT_EQ(expanded->order.size(), static_cast<size_t>(expanded->mesh.num_devices()));
  EXPECT_TRUE(ir::ValidatePlan(m.spec, *expanded).ok()) << ir::ValidatePlan(m.spec, *expanded);
  EXPECT_TRUE(CheckPlanOrder(*expanded).ok()) << CheckPlanOrder(*expanded);
  auto explicit_blocks = BlocksFromPlan(m.spec, *expanded);
  ASSERT_TRUE(explicit_blocks.ok()) << explicit_blocks.status();
  ExpectOrderFollowsSchedule(*expanded, *explicit_blocks, schedule);
  // Replica 1 runs replica 0's programs, shifted.
  for (int64_t d = 0; d < unit; ++d) {
    ASSERT_EQ(expanded->order[d].size(), expanded->order[d + unit].size()) << "device " << d;
  }
  auto report = exec::CheckPlanNumerics(m.spec, *expanded, /*seed=*/5);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
}

// A factored order that names a copy an item does not have, repeats a step or
// lists more steps than the plan holds is refused with its place.
TEST(PlanBlocksTest, BrokenFactoredOrdersAreRefused) {
  transform::Strategy st = Make(2, 1, 2, 2);
  st.factored = true;
  ir::Graph spec = TinyStep("llama3-8b", 2, 2, 4);
  auto plan = transform::Parallelize(spec, st);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto blocks = BlocksFromPlan(spec, *plan);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  auto ordered = ApplySchedule(*plan, *blocks, OneFOneB(blocks->model, 2));
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_TRUE(ir::ValidatePlan(spec, *ordered).ok());
  // An untagged step given a copy, a tagged step's copy out of range, a step twice.
  auto edited = [&](const std::function<void(std::vector<std::vector<ir::PlanStep>>&)>& edit) {
    std::vector<std::vector<ir::PlanStep>> programs;
    for (size_t d = 0; d < ordered->factored_order.programs.size(); ++d) {
      programs.push_back(ordered->factored_order.Program(d));
    }
    edit(programs);
    ir::Plan plan = *ordered;
    plan.factored_order = ir::FactoredOrder::FromPrograms(programs);
    return plan;
  };
  ir::Plan bad = edited([](auto& programs) {
    for (ir::PlanStep& step : programs[0]) {
      if (step.microbatch < 0) {
        step.microbatch = 0;
        break;
      }
    }
  });
  EXPECT_NE(ir::ValidatePlan(spec, bad).message().find("untagged"), absl::string_view::npos)
      << ir::ValidatePlan(spec, bad);
  bad = edited([](auto& programs) {
    for (ir::PlanStep& step : programs[0]) {
      if (step.microbatch >= 0) {
        step.microbatch = 2;
        break;
      }
    }
  });
  EXPECT_NE(ir::ValidatePlan(spec, bad).message().find("expected 0..1"), absl::string_view::npos)
      << ir::ValidatePlan(spec, bad);
  EXPECT_FALSE(ir::ExpandPlan(spec, bad).ok());
  bad = edited([](auto& programs) { programs[0].push_back(programs[0].front()); });
  EXPECT_NE(ir::ValidatePlan(spec, bad).message().find("appears twice"), absl::string_view::npos)
      << ir::ValidatePlan(spec, bad);
  // One program short of the scale unit.
  bad = *ordered;
  bad.factored_order.programs.pop_back();
  EXPECT_FALSE(ir::ValidatePlan(spec, bad).ok());
  // JSON: a run naming a segment that is not there; an order repeating a segment
  // past the plan's size reads, but is refused before it is expanded.
  std::string text = ir::PlanToJson(*ordered);
  const size_t at = text.find("\"order\": [\n    [[");
  ASSERT_NE(at, std::string::npos);
  std::string unknown = text;
  unknown.insert(at + std::string("\"order\": [\n    [").size(), "[999999,0],");
  auto read = ir::PlanFromJson(unknown, "p.json");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("order[0][0]: unknown segment 999999"),
            absl::string_view::npos)
      << read.status();
  std::string repeated = text;
  std::string runs;
  for (int i = 0; i < 100000; ++i) runs += "[0,-1],";
  repeated.insert(at + std::string("\"order\": [\n    [").size(), runs);
  read = ir::PlanFromJson(repeated, "p.json");
  ASSERT_TRUE(read.ok()) << read.status();
  auto expanded = ir::ExpandPlan(spec, *read);
  ASSERT_FALSE(expanded.ok());
  EXPECT_NE(expanded.status().message().find("more than the plan's"), absl::string_view::npos)
      << expanded.status();
  EXPECT_FALSE(ir::ValidatePlan(spec, *read).ok());
}

// The scale unit's steps over all micro-batches are bounded.
TEST(PlanBlocksTest, FactoredPlanAboveTheStepLimitIsRefused) {
  transform::Strategy st = Make(2, 1, 2, 2);
  st.factored = true;
  ir::Graph spec = TinyStep("llama3-8b", 2, 2, 4);
  auto plan = transform::Parallelize(spec, st);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto blocks = BlocksFromPlan(spec, *plan);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  auto ordered = ApplySchedule(*plan, *blocks, OneFOneB(blocks->model, 2),
                               /*max_expanded_steps=*/100);
  ASSERT_FALSE(ordered.ok());
  EXPECT_EQ(ordered.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ordered.status().message().find("scale unit"), absl::string_view::npos)
      << ordered.status();
}

// Schedules that do not fit the plan or its blocks are rejected.
TEST(PlanBlocksTest, RejectsMismatchedOrInvalidSchedules) {
  Made m = MakeBlocks("llama3-8b", Make(1, 1, 2, 2), 2);
  auto wrong_count = ApplySchedule(m.plan, m.blocks, OneFOneB(m.blocks.model, 3));
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(wrong_count.status().message().find("micro-batches"), absl::string_view::npos)
      << wrong_count.status();
  // Rank 1 runs B1 before F1: the schedule deadlocks.
  Schedule bad = OneFOneB(m.blocks.model, 2);
  std::vector<Instance>& rank1 = bad.order[1];
  std::reverse(rank1.begin(), rank1.end());
  auto invalid = ApplySchedule(m.plan, m.blocks, bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(invalid.status().message().find("schedule is invalid"), absl::string_view::npos)
      << invalid.status();
  // Blocks of another plan.
  Made other = MakeBlocks("llama3-8b", Make(1, 1, 2, 2, 1, false), 2);
  other.blocks.model.blocks[0].name = "X0";
  auto mismatched = ApplySchedule(m.plan, other.blocks, OneFOneB(m.blocks.model, 2));
  EXPECT_FALSE(mismatched.ok());
}

// The order checker finds collectives issued in different orders by their
// members, values used before they are made, and steps listed twice.
TEST(PlanBlocksTest, CheckPlanOrderFindsBrokenPrograms) {
  Made m = MakeBlocks("llama3-8b", Make(1, 2, 2, 2), 2);
  auto ordered = ApplySchedule(m.plan, m.blocks, OneFOneB(m.blocks.model, 2));
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  ASSERT_TRUE(CheckPlanOrder(*ordered).ok()) << CheckPlanOrder(*ordered);
  // Swap the first two collectives of device 0.
  ir::Plan swapped = *ordered;
  std::vector<ir::PlanStep>& steps = swapped.order[0];
  std::vector<size_t> collectives;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].is_collective) collectives.push_back(i);
  }
  ASSERT_GE(collectives.size(), 2u);
  std::swap(steps[collectives[0]], steps[collectives[1]]);
  absl::Status deadlock = CheckPlanOrder(swapped);
  EXPECT_NE(deadlock.message().find("deadlock"), absl::string_view::npos) << deadlock;
  // Run device 0's last task first.
  ir::Plan early = *ordered;
  std::vector<ir::PlanStep>& first = early.order[0];
  std::rotate(first.begin(), first.end() - 1, first.end());
  EXPECT_FALSE(CheckPlanOrder(early).ok());
  ir::Plan twice = *ordered;
  twice.order[0].push_back(twice.order[0].front());
  EXPECT_FALSE(CheckPlanOrder(twice).ok());
  ir::Plan none = m.plan;
  EXPECT_FALSE(CheckPlanOrder(none).ok());
}

// A cost model that is not positive is refused.
TEST(PlanBlocksTest, RejectsNonPositiveCostModel) {
  Made m = MakeBlocks("llama3-8b", Make(1, 1, 2, 2), 2);
  CostModel cost;
  cost.flops_per_second = 0;
  EXPECT_EQ(BlocksFromPlan(m.spec, m.plan, cost).status().code(),
            absl::StatusCode::kInvalidArgument);
  cost = CostModel{};
  cost.bytes_per_memory_unit = 0;
  EXPECT_FALSE(BlocksFromPlan(m.spec, m.plan, cost).ok());
}

}  // namespace
}  // namespace loom::schedule
