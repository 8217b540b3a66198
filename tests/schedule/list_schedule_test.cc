#include "schedule/list_schedule.h"

#include <string>

#include "gtest/gtest.h"
#include "schedule/placements.h"

namespace loom::schedule {
namespace {

// Every rule gives a valid schedule of every preset within its cap (or a dead end,
// never an invalid schedule), named after the rule.
TEST(ListScheduleTest, ValidWithinTheCapsOrNone) {
  int made = 0;
  for (const std::string& name : PlacementNames()) {
    for (int64_t cap : {4, 20}) {
      auto m = MakePlacement(name, 4);
      ASSERT_TRUE(m.ok()) << m.status();
      m->SetUniformCap(cap);
      if (!ValidateBlockModel(*m).ok()) continue;  // one micro-batch needs more
      auto facts = AnalyzeBlockModel(*m);
      ASSERT_TRUE(facts.ok()) << facts.status();
      for (ListPriority rule : ListPriorities()) {
        SCOPED_TRACE(name + " cap " + std::to_string(cap) + " " + ListPriorityName(rule));
        std::optional<Schedule> s = ListSchedule(*m, *facts, 6, rule);
        if (!s.has_value()) continue;
        ++made;
        EXPECT_EQ(s->name, "list/" + ListPriorityName(rule));
        auto sim = Simulate(*m, *s);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_TRUE(sim->valid) << sim->violation;
      }
    }
  }
  EXPECT_GT(made, 30);
}

// Without caps, micro-batches in order on a two-stage pipeline: each stage is busy
// from the first forward it can run to its last block, with no gap.
TEST(ListScheduleTest, FillsAPipelineWithoutCaps) {
  auto m = MakeStageModel(2, 2, "loop", StageCosts{1, 1, 0, 0, 2, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  auto facts = AnalyzeBlockModel(*m);
  ASSERT_TRUE(facts.ok());
  std::optional<Schedule> s = ListSchedule(*m, *facts, 4, ListPriority::kMicrobatchFirst);
  ASSERT_TRUE(s.has_value());
  auto sim = Simulate(*m, *s);
  ASSERT_TRUE(sim.ok() && sim->valid);
  // F0 F1 of 4 micro-batches then their backwards: 4 + 4 on each device, plus the
  // one-block offset of device 1 at the start and device 0 at the end.
  EXPECT_EQ(sim->makespan, 10);
}

// A dead end: the only block that can start would exceed the cap.
TEST(ListScheduleTest, DeadEndIsNone) {
  BlockModel m;
  m.name = "grow";
  m.num_devices = 1;
  Block b;
  b.name = "keep";
  b.memory = 1;
  b.devices = {0};
  m.blocks.push_back(b);
  m.SetUniformCap(1);
  auto facts = AnalyzeBlockModel(m);
  ASSERT_TRUE(facts.ok());
  EXPECT_FALSE(ListSchedule(m, *facts, 2, ListPriority::kFreeMemoryFirst).has_value());
  EXPECT_TRUE(ListSchedule(m, *facts, 1, ListPriority::kFreeMemoryFirst).has_value());
}

}  // namespace
}  // namespace loom::schedule
