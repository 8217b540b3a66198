#include "schedule/inflight_search.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/placements.h"
#include "schedule/predefined.h"
#include "schedule/search.h"

namespace loom::schedule {
namespace {

const auto kNoDeadline = std::chrono::steady_clock::time_point::max();

std::vector<WeightPolicy> Fill(int devices) {
  return std::vector<WeightPolicy>(devices, WeightPolicy::kFillGaps);
}

ModelFacts Facts(const BlockModel& m) {
  auto facts = AnalyzeBlockModel(m);
  EXPECT_TRUE(facts.ok()) << facts.status();
  return *facts;
}

// With one micro-batch in flight per device, no device ever holds two micro-batches'
// activations: the peak is one forward's, plus the weight memory of a deferred W.
TEST(InFlightSearchTest, LimitsBoundTheMicrobatchesInFlight) {
  auto m = MakeStageModel(4, 4, "loop", StageCosts{1, 1, 1, 0, 2, 1});
  ASSERT_TRUE(m.ok());
  const ModelFacts facts = Facts(*m);
  std::optional<Schedule> s =
      InFlightSchedule(*m, facts, 8, InFlightLimits{{1, 1, 1, 1}, Fill(4)});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->name, "inflight");
  auto sim = Simulate(*m, *s);
  ASSERT_TRUE(sim.ok() && sim->valid) << sim->violation;
  for (int64_t peak : sim->peak_memory) EXPECT_LE(peak, 3);
  // Four in flight on the first device: its peak holds four forwards (W deferred
  // may keep some of their weight memory too).
  std::optional<Schedule> wide =
      InFlightSchedule(*m, facts, 8, InFlightLimits{{4, 3, 2, 1}, Fill(4)});
  ASSERT_TRUE(wide.has_value());
  auto wide_sim = Simulate(*m, *wide);
  ASSERT_TRUE(wide_sim.ok() && wide_sim->valid) << wide_sim->violation;
  EXPECT_GE(wide_sim->peak_memory[0], 8);
  EXPECT_LT(wide_sim->makespan, sim->makespan);
}

// Every schedule the rule makes is valid within the caps, on every stage layout, or
// a dead end; never an invalid schedule.
TEST(InFlightSearchTest, ValidWithinTheCaps) {
  int made = 0;
  for (const std::string& layout : {"loop", "v"}) {
    for (int p : {2, 3, 4}) {
      const int stages = layout == "v" ? 2 * p : p;
      auto m = MakeStageModel(p, stages, layout, StageCosts{2, 3, 1, 1, 2, 1});
      ASSERT_TRUE(m.ok()) << m.status();
      for (int64_t cap : {4, 6, 12}) {
        m->SetUniformCap(cap);
        if (!ValidateBlockModel(*m).ok()) continue;
        const ModelFacts facts = Facts(*m);
        for (int limit : {1, 2, 5}) {
          for (int policy = 0; policy < kWeightPolicies; ++policy) {
          SCOPED_TRACE(absl::StrCat(layout, " p ", p, " cap ", cap, " limit ", limit,
                                    " weight policy ", policy));
          std::optional<Schedule> s = InFlightSchedule(
              *m, facts, 6,
              InFlightLimits{std::vector<int>(p, limit),
                             std::vector<WeightPolicy>(p, static_cast<WeightPolicy>(policy))});
          if (!s.has_value()) continue;
          ++made;
          auto sim = Simulate(*m, *s);
          ASSERT_TRUE(sim.ok()) << sim.status();
          EXPECT_TRUE(sim->valid) << sim->violation;
          }
        }
      }
    }
  }
  EXPECT_GT(made, 90);
}

// Equal F, B and W with twice 1F1B's memory: deferring W into the gaps, the search
// finds a schedule whose longest span is the busiest device's work (no bubble
// inside any device's span), which no schedule can beat; by makespan it does no
// worse than ZB-H2's order.
TEST(InFlightSearchTest, ReachesTheSpanBoundWhereZeroBubbleDoes) {
  auto m = MakeStageModel(4, 4, "loop", StageCosts{1, 1, 1, 0, 2, 1});
  ASSERT_TRUE(m.ok());
  m->SetUniformCap(2 * 4 * 2);
  const ModelFacts facts = Facts(*m);
  std::optional<InFlightSearchResult> span =
      SearchInFlightLimits(*m, facts, 12, Objective::kSpan, 200, kNoDeadline);
  ASSERT_TRUE(span.has_value());
  EXPECT_TRUE(span->sim.valid) << span->sim.violation;
  EXPECT_EQ(span->sim.span, 12 * 3);
  EXPECT_GT(span->evaluations, 1);
  std::optional<InFlightSearchResult> makespan =
      SearchInFlightLimits(*m, facts, 12, Objective::kMakespan, 200, kNoDeadline);
  ASSERT_TRUE(makespan.has_value());
  auto h2 = Simulate(*m, *MakePredefinedSchedule("zb_h2", *m, 12));
  ASSERT_TRUE(h2.ok() && h2->valid);
  EXPECT_LE(makespan->sim.makespan, h2->makespan);
}

// A block on several devices: the rule does not apply.
TEST(InFlightSearchTest, NotDefinedWhereABlockSpansDevices) {
  auto m = MakePlacement("mshape", 4);
  ASSERT_TRUE(m.ok());
  const ModelFacts facts = Facts(*m);
  EXPECT_FALSE(
      InFlightSchedule(*m, facts, 4, InFlightLimits{std::vector<int>(4, 2), Fill(4)})
          .has_value());
  EXPECT_FALSE(
      SearchInFlightLimits(*m, facts, 4, Objective::kSpan, 10, kNoDeadline).has_value());
}

// The search by span: the schedule returned has the least span of every candidate
// (each timed for its least), and the bound is claimed only when met.
TEST(InFlightSearchTest, SearchBySpanReturnsTheLeastSpan) {
  auto m = MakeStageModel(4, 4, "loop", StageCosts{3, 3, 2, 1, 2, 1});
  ASSERT_TRUE(m.ok());
  m->SetUniformCap(2 * 4 * 2);
  SearchOptions o;
  o.microbatches = 16;
  o.objective = Objective::kSpan;
  auto r = SearchSchedule(*m, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->objective, Objective::kSpan);
  EXPECT_TRUE(r->sim.valid);
  EXPECT_EQ(r->span_lower_bound, 16 * 8);
  EXPECT_EQ(r->span_optimal, r->sim.span == r->span_lower_bound);
  int compared = 0;
  for (const ScheduleCandidate& c : r->candidates) {
    if (!c.fits) continue;
    ++compared;
    EXPECT_GE(c.span, r->sim.span) << c.name;
  }
  EXPECT_GT(compared, 4);
}

}  // namespace
}  // namespace loom::schedule

namespace loom::schedule {
namespace {

// A published schedule's cool-down run by the rule: every device keeps its order up
// to its last forward, the result is valid, and with W deferred the cool-down runs
// the backwards first on every device.
TEST(InFlightSearchTest, CompleteCooldownKeepsTheOrderUpToTheLastForward) {
  auto m = MakeStageModel(4, 8, "v", StageCosts{2, 2, 1, 1, 2, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelFacts facts = Facts(*m);
  auto zb_v = MakePredefinedSchedule("zb_v", *m, 8);
  ASSERT_TRUE(zb_v.ok()) << zb_v.status();
  int compared = 0;
  for (int policy = 0; policy < kWeightPolicies; ++policy) {
    SCOPED_TRACE(WeightPolicyName(static_cast<WeightPolicy>(policy)));
    std::optional<Schedule> s =
        CompleteCooldown(*m, facts, *zb_v, static_cast<WeightPolicy>(policy));
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->name, "zb_v/cooldown-" + WeightPolicyName(static_cast<WeightPolicy>(policy)));
    auto sim = Simulate(*m, *s);
    ASSERT_TRUE(sim.ok());
    EXPECT_TRUE(sim->valid) << sim->violation;
    for (int d = 0; d < 4; ++d) {
      const std::vector<Instance>& before = zb_v->order[d];
      size_t tail = 0;
      for (size_t i = 0; i < before.size(); ++i) {
        if (m->blocks[before[i].block].kind == BlockKind::kForward) tail = i + 1;
      }
      ASSERT_EQ(s->order[d].size(), before.size());
      EXPECT_TRUE(std::equal(before.begin(), before.begin() + tail, s->order[d].begin()));
      if (static_cast<WeightPolicy>(policy) == WeightPolicy::kDefer) {
        // After the last forward: every backward before every W.
        bool weights = false;
        for (size_t i = tail; i < s->order[d].size(); ++i) {
          const bool w = m->blocks[s->order[d][i].block].kind == BlockKind::kBackwardWeight;
          EXPECT_FALSE(weights && !w) << "device " << d << " runs a backward after a W";
          weights |= w;
        }
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, kWeightPolicies);
}

}  // namespace
}  // namespace loom::schedule
