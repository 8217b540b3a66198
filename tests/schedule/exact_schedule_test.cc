#include "schedule/exact_schedule.h"

#include <chrono>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/placements.h"
#include "schedule/search.h"
#include "smt/schedule_optimum.h"
#include "tests/testing/solver_problem.h"

namespace loom::schedule {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNoBound = std::numeric_limits<int64_t>::max();

ExactScheduleResult Exact(const BlockModel& model, int microbatches, int64_t below = kNoBound,
                          int64_t node_limit = 50'000'000) {
  auto facts = AnalyzeBlockModel(model);
  EXPECT_TRUE(facts.ok()) << facts.status();
  return BranchAndBoundSchedule(model, *facts, microbatches, below, node_limit,
                                std::chrono::steady_clock::time_point::max());
}

// A random model: a chain with side branches over 2 or 3 devices; early blocks take
// memory, later ones on the same device give some back; a block may span devices.
BlockModel RandomModel(std::mt19937& rng, int index) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  BlockModel m;
  m.name = absl::StrCat("random", index);
  m.num_devices = pick(2, 3);
  const int blocks = pick(3, 5);
  for (int i = 0; i < blocks; ++i) {
    Block b;
    b.name = absl::StrCat("b", i);
    b.span = pick(1, 3);
    const int d = pick(0, m.num_devices - 1);
    b.devices = {d};
    if (pick(0, 5) == 0) {
      const int e = (d + 1) % m.num_devices;
      b.devices = {std::min(d, e), std::max(d, e)};
    }
    if (i > 0) b.preds.push_back({pick(std::max(0, i - 2), i - 1), pick(0, 1)});
    b.memory = i < blocks / 2 + 1 ? pick(0, 2) : -pick(0, 2);
    m.blocks.push_back(b);
  }
  return m;
}

// On small random models, tight and loose caps, the branch and bound covers every
// schedule and its makespan is Z3's optimum (or both find none); the schedule it
// returns is valid within the caps and as long as it says.
TEST(ExactScheduleTest, MatchesTheSolverOnSmallModels) {
  std::mt19937 rng(7);
  int compared = 0, infeasible = 0;
  for (int i = 0; i < 40; ++i) {
    BlockModel model = RandomModel(rng, i);
    auto facts = AnalyzeBlockModel(model);
    ASSERT_TRUE(facts.ok()) << facts.status();
    int64_t tight = 1;
    for (int64_t p : facts->single_peak) tight = std::max(tight, p);
    for (int64_t cap : {tight, tight + 2}) {
      model.SetUniformCap(cap);
      for (int n : {2, 3}) {
        SCOPED_TRACE(absl::StrCat(model.name, " cap ", cap, " N", n));
        auto opt = smt::MinimumMakespan(loom::testing::SolverProblem(model, n),
                                        /*timeout_ms=*/20'000);
        ASSERT_TRUE(opt.ok()) << opt.status();
        if (!opt->proved) continue;
        const ExactScheduleResult r = Exact(model, n);
        ASSERT_TRUE(r.exhaustive);
        ASSERT_EQ(r.schedule.has_value(), opt->feasible);
        ++compared;
        if (!opt->feasible) {
          ++infeasible;
          continue;
        }
        EXPECT_EQ(r.makespan, opt->makespan);
        auto sim = Simulate(model, *r.schedule);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_TRUE(sim->valid) << sim->violation;
        EXPECT_EQ(sim->makespan, r.makespan);
      }
    }
  }
  EXPECT_GE(compared, 120);
  EXPECT_GT(infeasible, 0);
}

// With a bound it looks only below it: at the optimum it finds nothing and says the
// search was exhaustive, one above it finds the optimum.
TEST(ExactScheduleTest, SearchesBelowTheBoundGiven) {
  auto model = MakeStageModel(2, 2, "loop", StageCosts{1, 1, 1, 1, 2, 1});
  ASSERT_TRUE(model.ok()) << model.status();
  model->SetUniformCap(6);
  ExactScheduleResult r = Exact(*model, 4);
  ASSERT_TRUE(r.exhaustive);
  ASSERT_TRUE(r.schedule.has_value());
  EXPECT_EQ(r.makespan, 14);
  EXPECT_EQ(r.schedule->name, "exact");
  r = Exact(*model, 4, /*below=*/14);
  EXPECT_TRUE(r.exhaustive);
  EXPECT_FALSE(r.schedule.has_value());
  r = Exact(*model, 4, /*below=*/15);
  ASSERT_TRUE(r.schedule.has_value());
  EXPECT_EQ(r.makespan, 14);
}

// A node limit ends the search without a claim.
TEST(ExactScheduleTest, NodeLimitIsNotAProof) {
  auto model = MakeStageModel(4, 4, "loop", StageCosts{1, 1, 1, 1, 2, 1});
  ASSERT_TRUE(model.ok()) << model.status();
  model->SetUniformCap(6);
  const ExactScheduleResult r = Exact(*model, 8, kNoBound, /*node_limit=*/100);
  EXPECT_FALSE(r.exhaustive);
  EXPECT_LE(r.nodes, 101);
}

// One device, +2 then -1 after it: 2 micro-batches under cap 2 pass the kept-memory
// rule (they end holding 2) but no order fits, since the second +2 needs the level at
// 0 and the first micro-batch leaves 1. The search proves it and says so.
TEST(ExactScheduleTest, ProvesThatNoScheduleExists) {
  BlockModel m;
  m.name = "keeps_one";
  m.num_devices = 1;
  m.blocks = {Block{"take", BlockKind::kOther, -1, 1, 2, {0}, {}},
              Block{"give", BlockKind::kOther, -1, 1, -1, {0}, {Dep{0, 0}}}};
  m.SetUniformCap(2);
  const ExactScheduleResult r = Exact(m, 2);
  EXPECT_TRUE(r.exhaustive);
  EXPECT_FALSE(r.schedule.has_value());
  SearchOptions o;
  o.microbatches = 2;
  auto searched = SearchSchedule(m, o);
  ASSERT_FALSE(searched.ok());
  EXPECT_EQ(searched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(searched.status().message()), HasSubstr("proved"));
  m.SetUniformCap(3);
  searched = SearchSchedule(m, o);
  ASSERT_TRUE(searched.ok()) << searched.status();
  EXPECT_TRUE(searched->sim.valid);
}

// The search returns the branch and bound's schedule where it is shorter than every
// other, and says the makespan is optimal with the proof: 2 stages on 2 devices, 4
// micro-batches, cap 6 (ZB-H2 takes 15; the optimum is 14).
TEST(ExactScheduleTest, SearchReturnsAndProvesTheOptimum) {
  auto model = MakeStageModel(2, 2, "loop", StageCosts{1, 1, 1, 1, 2, 1});
  ASSERT_TRUE(model.ok()) << model.status();
  model->SetUniformCap(6);
  SearchOptions o;
  o.microbatches = 4;
  auto r = SearchSchedule(*model, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sim.makespan, 14);
  EXPECT_TRUE(r->makespan_optimal);
  EXPECT_FALSE(r->makespan_proof.empty());
  // At 4 stages on 4 devices the optimum (30) is above the lower bound: the proof is
  // the exhaustive search.
  model = MakeStageModel(4, 4, "loop", StageCosts{1, 1, 1, 1, 2, 1});
  ASSERT_TRUE(model.ok()) << model.status();
  model->SetUniformCap(6);
  r = SearchSchedule(*model, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sim.makespan, 30);
  EXPECT_GT(r->sim.makespan, r->makespan_lower_bound);
  EXPECT_TRUE(r->makespan_optimal);
  EXPECT_THAT(r->makespan_proof, HasSubstr("branch and bound"));
}

// Above 20 blocks on a device the least peak of one micro-batch is a lower bound, so
// a cap is refused only when it is proved too small: 11 pairs (+1, then -1 after it)
// fit under cap 1 taken pair by pair, though the order by id peaks at 11.
TEST(ExactScheduleTest, LargeDevicesAreRefusedOnlyByProof) {
  BlockModel m;
  m.name = "pairs";
  m.num_devices = 1;
  for (int i = 0; i < 11; ++i) {
    m.blocks.push_back(Block{absl::StrCat("take", i), BlockKind::kOther, -1, 1, 1, {0}, {}});
  }
  for (int i = 0; i < 11; ++i) {
    m.blocks.push_back(
        Block{absl::StrCat("give", i), BlockKind::kOther, -1, 1, -1, {0}, {Dep{i, 0}}});
  }
  m.SetUniformCap(1);
  EXPECT_TRUE(ValidateBlockModel(m).ok()) << ValidateBlockModel(m);
  m.SetUniformCap(0);
  EXPECT_FALSE(ValidateBlockModel(m).ok());
}

// Where a block frees memory its micro-batch has not taken (a prefix below zero), a
// cap below one micro-batch's least peak refuses one micro-batch but not more: P +10
// then Q -10, R -5 then S +5, on one device under cap 4. Alone the least peak is 5;
// two micro-batches run R, R, P, Q, P, Q, S, S and never exceed 0.
TEST(ExactScheduleTest, CapBelowOneMicrobatchIsRefusedOnlyForOne) {
  BlockModel m;
  m.name = "credit";
  m.num_devices = 1;
  m.blocks = {Block{"P", BlockKind::kOther, -1, 1, 10, {0}, {}},
              Block{"Q", BlockKind::kOther, -1, 1, -10, {0}, {Dep{0, 0}}},
              Block{"R", BlockKind::kOther, -1, 1, -5, {0}, {}},
              Block{"S", BlockKind::kOther, -1, 1, 5, {0}, {Dep{2, 0}}}};
  m.SetUniformCap(4);
  EXPECT_TRUE(ValidateBlockModel(m).ok()) << ValidateBlockModel(m);
  SearchOptions o;
  o.microbatches = 1;
  auto r = SearchSchedule(m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("below what one micro-batch needs"));
  o.microbatches = 2;
  r = SearchSchedule(m, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->sim.valid) << r->sim.violation;
  EXPECT_LE(r->sim.peak_memory[0], 4);
  // Without such a block the refusal holds for every count.
  m.blocks[2].memory = 0;
  m.blocks[3].memory = 0;
  EXPECT_FALSE(ValidateBlockModel(m).ok());
}

}  // namespace
}  // namespace loom::schedule
