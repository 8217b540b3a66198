#include "schedule/search.h"

#include <string>

#include "bench/tessel_cases.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/chain_model.h"
#include "schedule/placements.h"
#include "schedule/predefined.h"

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
  // No cap: the solver proves that period 2 has no repetend.
  EXPECT_TRUE(r->period_optimal);
  EXPECT_THAT(r->gap_reason, HasSubstr("no repetend at period 2 (proved"));
  EXPECT_EQ(r->sim.makespan, 48);
}

// Tessel's placements on 16 devices without a cap reach their period bound: the
// search hands the periods it leaves undecided to the solver.
TEST(SearchTest, TesselPlacementsReachTheirPeriodBoundWithoutCaps) {
  for (const std::string& name : {std::string("mshape"), std::string("nnshape")}) {
    auto m = MakePlacement(name, 16, /*inference=*/false);
    ASSERT_TRUE(m.ok()) << m.status();
    m->memory_cap.clear();
    auto r = Search(*m, 32);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    EXPECT_TRUE(r->sim.valid) << name;
    EXPECT_EQ(r->period, r->period_lower_bound) << name << ": " << r->gap_reason;
    EXPECT_TRUE(r->period_optimal) << name;
  }
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

// Spans of thousands of units (microseconds): the repetend is searched on a
// coarser grid and is still a repetend of the model itself, its period the
// scaled one; the schedule is timed in the model's own units.
TEST(SearchTest, LongSpansAreSearchedOnAGrid) {
  auto unit = MakeStageModel(4, 4, "loop", StageCosts{2, 2, 2, 1, 2, 1});
  auto fine = MakeStageModel(4, 4, "loop", StageCosts{2000, 2000, 2000, 1000, 2, 1});
  ASSERT_TRUE(unit.ok() && fine.ok());
  unit->SetUniformCap(8);
  fine->SetUniformCap(8);
  SearchOptions o;
  o.microbatches = 32;
  o.compare_alternatives = false;
  auto coarse_result = SearchSchedule(*unit, o);
  auto fine_result = SearchSchedule(*fine, o);
  ASSERT_TRUE(coarse_result.ok() && fine_result.ok());
  EXPECT_TRUE(fine_result->sim.valid) << fine_result->sim.violation;
  EXPECT_EQ(fine_result->period, 1000 * coarse_result->period);
  EXPECT_EQ(fine_result->period_lower_bound, 6000);
  EXPECT_TRUE(fine_result->period_optimal);
  EXPECT_EQ(fine_result->schedule.order, coarse_result->schedule.order);
  EXPECT_EQ(fine_result->sim.makespan, 1000 * coarse_result->sim.makespan);
  // Offsets scaled back are a valid timing of the fine model.
  ASSERT_TRUE(fine_result->schedule.repetend.has_value());
  EXPECT_EQ(fine_result->schedule.repetend->period, fine_result->period);
  Schedule repeated = fine_result->schedule;
  const int n = fine->num_blocks();
  repeated.start.assign(static_cast<size_t>(n) * o.microbatches, 0);
  for (int mb = 0; mb < o.microbatches; ++mb) {
    for (int b = 0; b < n; ++b) {
      repeated.start[mb * n + b] =
          fine_result->schedule.repetend->offset[b] + mb * fine_result->period;
    }
  }
  repeated.order = ScheduleFromTimes(*fine, o.microbatches, repeated.start).order;
  auto sim = Simulate(*fine, repeated);
  ASSERT_TRUE(sim.ok());
  EXPECT_TRUE(sim->valid) << sim->violation;
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
              HasSubstr("device 0 keeps 1 memory per micro-batch, so 8 micro-batches end "
                        "holding 8, above its cap 3 (no schedule can exist)"));
  r = Search(Placement("vshape", 2, 3), 0);
  EXPECT_FALSE(r.ok());
}

// What every micro-batch keeps refuses a cap only when the end of the schedule
// exceeds it: +2, -2, then +1 on one device fits 2 micro-batches under cap 2 (the
// two +2/-2 pairs first, then both +1), and 3 micro-batches are proved impossible.
TEST(SearchTest, KeptMemoryRefusesOnlyWhatIsProved) {
  BlockModel m;
  m.name = "keeps_one";
  m.num_devices = 1;
  auto add = [&](const char* name, int64_t memory) {
    Block b;
    b.name = name;
    b.memory = memory;
    b.devices = {0};
    if (!m.blocks.empty()) b.preds.push_back(Dep{m.num_blocks() - 1, 0});
    m.blocks.push_back(b);
  };
  add("hold", 2);
  add("free", -2);
  add("keep", 1);
  m.SetUniformCap(2);
  auto r = Search(m, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_EQ(r->sim.peak_memory, std::vector<int64_t>{2});
  r = Search(m, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no schedule can exist"));
}

// On the block model of every predefined schedule, within the memory that schedule
// needs, the schedule returned is never longer than it; where the searched repetend
// alone is longer, the predefined schedule is returned under its own name.
TEST(SearchTest, NeverLongerThanAPredefinedScheduleTheModelAdmits) {
  struct Case {
    const char* name;
    int stages_per_device;
    const char* layout;
    bool split;
  };
  for (const Case& c : {Case{"1f1b", 1, "loop", false}, Case{"interleaved_1f1b", 2, "loop", false},
                        Case{"zb_h2", 1, "loop", true}, Case{"zb_v", 2, "v", true}}) {
    for (int64_t lag : {0, 1}) {
      SCOPED_TRACE(absl::StrCat(c.name, ", lag ", lag));
      StageCosts costs{1, c.split ? 1 : 2, c.split ? 1 : 0, lag, 2, 1};
      auto m = MakeStageModel(4, 4 * c.stages_per_device, c.layout, costs);
      ASSERT_TRUE(m.ok()) << m.status();
      auto predefined = MakePredefinedSchedule(c.name, *m, 8);
      ASSERT_TRUE(predefined.ok()) << predefined.status();
      auto sim = Simulate(*m, *predefined);
      ASSERT_TRUE(sim.ok() && sim->valid);
      m->memory_cap = sim->peak_memory;
      auto r = Search(*m, 8);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->sim.valid) << r->sim.violation;
      EXPECT_LE(r->sim.makespan, sim->makespan);
      for (int d = 0; d < 4; ++d) EXPECT_LE(r->sim.peak_memory[d], m->memory_cap[d]);
      ASSERT_FALSE(r->candidates.empty());
      const ScheduleCandidate& searched = r->candidates.front();
      EXPECT_EQ(searched.name, "search");
      if (!searched.fits || searched.makespan > sim->makespan) {
        EXPECT_NE(r->schedule.name, "search");
        EXPECT_FALSE(r->schedule.repetend.has_value());
      }
      bool compared = false;
      for (const ScheduleCandidate& k : r->candidates) {
        if (k.name != c.name) continue;
        compared = true;
        EXPECT_TRUE(k.fits) << k.why_not;
        EXPECT_EQ(k.makespan, sim->makespan);
      }
      EXPECT_TRUE(compared);
      EXPECT_EQ(r->makespan_optimal, !r->makespan_proof.empty());
      if (r->sim.makespan == r->makespan_lower_bound) EXPECT_TRUE(r->makespan_optimal);
    }
  }
}

// Where memory is too tight for micro-batches to overlap, micro-batches one after
// another still give a schedule: xshape on 4 devices at cap 1 (the repetend search
// finds none within its budget; the optimum for 2 micro-batches is 55).
TEST(SearchTest, NoRefusalWhereMicrobatchesCanRunOneAfterAnother) {
  SearchOptions o;
  o.microbatches = 2;
  o.node_limit = 20'000;
  auto r = SearchSchedule(Placement("xshape", 4, 1), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_EQ(r->sim.peak_memory, std::vector<int64_t>(4, 1));
  EXPECT_NE(r->schedule.name, "search");
  EXPECT_EQ(r->sim.makespan, 55);
  bool serial_fits = false;
  for (const ScheduleCandidate& c : r->candidates) serial_fits |= c.name == "serial" && c.fits;
  EXPECT_TRUE(serial_fits);
}

// A long chain (2,000 blocks on 4 devices) gets the optimal makespan from a list
// schedule; the repetend search, whose nodes cost more with every block, runs on a
// budget that shrinks accordingly instead of ending in micro-batches one at a time.
TEST(SearchTest, LongChainsMeetTheMakespanBound) {
  const BlockModel m = loom::testing::ChainModel(2000, 4);
  auto r = Search(m, 8);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_TRUE(r->makespan_optimal);
  EXPECT_EQ(r->sim.makespan, r->makespan_lower_bound);
}

// A time limit that has passed before the repetend search starts (the other
// schedules took it) still gives an answer: a schedule, or a limit of the search.
TEST(SearchTest, ExhaustedTimeLimitStillAnswers) {
  for (const std::string& name : {std::string("vshape"), std::string("xshape")}) {
    SearchOptions o;
    o.microbatches = 8;
    o.time_limit_seconds = 1e-9;
    auto r = SearchSchedule(Placement(name, 4, 4), o);
    if (r.ok()) {
      EXPECT_TRUE(r->sim.valid) << name;
      if (!r->period_optimal) {
        EXPECT_FALSE(r->gap_reason.empty()) << name;
      }
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
    }
  }
}

// Without the comparison the searched repetend is returned as it is.
TEST(SearchTest, ComparisonCanBeTurnedOff) {
  auto m = MakeStageModel(4, 8, "loop", StageCosts{1, 2, 0, 0, 2, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  SearchOptions o;
  o.microbatches = 8;
  o.compare_alternatives = false;
  auto r = SearchSchedule(*m, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->schedule.name, "search");
  ASSERT_EQ(r->candidates.size(), 1u);
}

}  // namespace
}  // namespace loom::schedule
