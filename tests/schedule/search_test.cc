#include "schedule/search.h"

#include <string>

#include "bench/tessel_cases.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/placements.h"

namespace loom::schedule {
namespace {

using ::testing::HasSubstr;

BlockModel Placement(const std::string& name, int devices, int64_t cap) {
  BlockModel m = *MakePlacement(name, devices);
  m.SetUniformCap(cap);
  return m;
}

absl::StatusOr<SearchResult> Search(const BlockModel& m, int microbatches) {
  SearchOptions o;
  o.microbatches = microbatches;
  return SearchSchedule(m, o);
}

// Every preset at 4, 6 and 8 devices under Tessel's memory caps: a valid schedule,
// the period at its lower bound (and said to be optimal), and a makespan no larger
// than Tessel's wherever Tessel produced one.
TEST(SearchTest, PresetsReachThePeriodBoundAndBeatTessel) {
  for (const bench::TesselCase& c : bench::TesselCases()) {
    SCOPED_TRACE(absl::StrCat(c.placement, " on ", c.devices, " devices, memory ", c.memory));
    auto r = Search(Placement(c.placement, c.devices, c.memory), 128);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->sim.valid) << r->sim.violation;
    EXPECT_TRUE(r->period_optimal);
    EXPECT_EQ(r->period, r->period_lower_bound);
    EXPECT_EQ(r->gap_reason, "");
    EXPECT_GE(r->sim.makespan, r->makespan_lower_bound);
    for (int64_t peak : r->sim.peak_memory) EXPECT_LE(peak, c.memory);
    if (c.tessel_makespan > 0) {
      EXPECT_LE(r->sim.makespan, c.tessel_makespan);
    }
  }
}

// Warm-up and cool-down are tightened with the repetend: vshape on 4 devices with 4
// micro-batches takes 28 steps, the optimum (Tessel's composed schedule takes 37).
TEST(SearchTest, RampsAreRetimedJointly) {
  auto r = Search(Placement("vshape", 4, 4), 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sim.makespan, 28);
  EXPECT_EQ(r->makespan_lower_bound, 28);
  EXPECT_EQ(r->sim.peak_memory, (std::vector<int64_t>{4, 3, 2, 1}));
}

// The same input gives the same schedule.
TEST(SearchTest, IsDeterministic) {
  const BlockModel m = Placement("nnshape", 6, 20);
  auto a = Search(m, 32);
  auto b = Search(m, 32);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->schedule.order, b->schedule.order);
  EXPECT_EQ(a->schedule.repetend->offset, b->schedule.repetend->offset);
  EXPECT_EQ(a->nodes, b->nodes);
}

// A cap too small for the period bound raises the period, and the report says why.
TEST(SearchTest, ReportsMemoryGap) {
  // Device 0's backward starts at least 13 steps after its forward; with room for
  // two micro-batches that distance must stay below two periods and the two blocks
  // must not share a column: 13 is 6 mod 7, where the 3-step backward would run
  // into the forward, and the next free distances (15 to 18) exceed two periods of
  // 7. Period 8 puts the backward at distance 13 in columns 5 to 7.
  auto r = Search(Placement("vshape", 4, 2), 64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_FALSE(r->period_optimal);
  EXPECT_EQ(r->period, 8);
  // Period 4 is ruled out for every schedule: device 0 would hold 4 micro-batches.
  EXPECT_THAT(r->gap_reason, HasSubstr("period 4: device 0 must hold at least 4 memory"));
  for (int64_t peak : r->sim.peak_memory) EXPECT_LE(peak, 2);
}

// Blocks on overlapping device pairs that cannot share a column: the period bound
// of 2 is unreachable and the report says the blocks cannot be packed.
TEST(SearchTest, ReportsPackingGap) {
  BlockModel m;
  m.name = "triangle";
  m.num_devices = 3;
  auto add = [&](const char* name, std::vector<int> devices) {
    Block b;
    b.name = name;
    b.devices = std::move(devices);
    m.blocks.push_back(b);
  };
  add("x", {0, 1});
  add("y", {1, 2});
  add("z", {0, 2});
  auto r = Search(m, 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->period_lower_bound, 2);
  EXPECT_EQ(r->period, 3);
  EXPECT_THAT(r->gap_reason, HasSubstr("period 2: the blocks cannot be packed"));
  EXPECT_EQ(r->sim.makespan, 48);
}

// The inference forms schedule with no memory and reach their period bound.
TEST(SearchTest, InferenceForms) {
  for (const std::string& name : PlacementNames()) {
    if (name == "mllm" || name == "nnshape_eager") continue;
    auto m = MakePlacement(name, 8, /*inference=*/true);
    ASSERT_TRUE(m.ok()) << m.status();
    auto r = Search(*m, 128);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_TRUE(r->sim.valid) << name;
    EXPECT_TRUE(r->period_optimal) << name;
    EXPECT_EQ(r->sim.peak_memory, std::vector<int64_t>(8, 0)) << name;
  }
}

// Zero Bubble's stage model with a split backward and transfer lags: the period is
// F + I + W per device and the transfers stretch only the ramps.
TEST(SearchTest, StageModelWithCommunication) {
  auto m = MakeStageModel(4, 4, "loop", StageCosts{2, 2, 2, 1, 2, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  m->SetUniformCap(8);
  auto r = Search(*m, 32);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_EQ(r->period, 6);
  EXPECT_TRUE(r->period_optimal);
  EXPECT_LE(r->sim.makespan, 32 * 6 + r->latency);
}

// Bad models are refused with one clear error.
TEST(SearchTest, RejectsBadModels) {
  auto r = Search(Placement("vshape", 4, 0), 8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("below what one micro-batch needs"));
  BlockModel leak = Placement("vshape", 2, 3);
  leak.blocks.back().memory = 0;  // device 0 never frees its activation
  r = Search(leak, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("device 0 keeps 1 memory per micro-batch, so 8 micro-batches cannot "
                        "stay within its cap 3"));
  r = Search(Placement("vshape", 2, 3), 0);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace loom::schedule
