#include "smt/schedule_optimum.h"

#include "gtest/gtest.h"

namespace loom::smt {
namespace {

ScheduleJob Job(int64_t span, int64_t memory, int device,
                std::vector<std::pair<int, int64_t>> preds = {}) {
  ScheduleJob j;
  j.span = span;
  j.memory = memory;
  j.devices = {device};
  j.preds = std::move(preds);
  return j;
}

// Two independent chains, each a job on device 0 then one on device 1. Device 0's
// jobs run back to back (0-2, 2-4), device 1's after them (2-4, 4-6): makespan 6.
// Memory changes only on the device a job runs on, so device 0 ends holding both
// +1s: a cap of 1 there leaves no schedule (proved), a cap of 2 the same one.
TEST(ScheduleOptimumTest, MinimisesWithinTheCaps) {
  ScheduleProblem p;
  p.num_devices = 2;
  p.jobs = {Job(2, 1, 0), Job(2, -1, 1, {{0, 0}}), Job(2, 1, 0), Job(2, -1, 1, {{2, 0}})};
  auto free = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_TRUE(free->feasible && free->proved);
  EXPECT_EQ(free->makespan, 6);
  p.caps = {1, 1};
  auto capped = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_TRUE(capped->proved);
  EXPECT_FALSE(capped->feasible);
  p.caps = {2, 1};
  capped = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_TRUE(capped->feasible && capped->proved);
  EXPECT_EQ(capped->makespan, 6);
  ASSERT_EQ(capped->start.size(), 4u);
  EXPECT_GE(capped->start[1], capped->start[0] + 2);
  EXPECT_GE(capped->start[3], capped->start[2] + 2);
}

// A job freeing memory lets the next one start: +1, -1, +1 on one device with cap
// 1 runs in order, and the dependency lag is kept.
TEST(ScheduleOptimumTest, KeepsLagsAndMemoryOrder) {
  ScheduleProblem p;
  p.num_devices = 1;
  p.caps = {1};
  p.jobs = {Job(1, 1, 0), Job(1, -1, 0, {{0, 3}}), Job(1, 1, 0)};
  auto r = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible && r->proved);
  // Job 2 cannot run while job 0's +1 is held, so it follows job 1 (at 4 or later).
  EXPECT_EQ(r->makespan, 6);
  EXPECT_GE(r->start[2], r->start[1] + 1);
}

// Asked for a schedule shorter than a bound, the solver finds none at the optimum
// (a proof that none is shorter) and the optimum one above it.
TEST(ScheduleOptimumTest, SeeksOnlyBelowTheBoundGiven) {
  ScheduleProblem p;
  p.num_devices = 2;
  p.jobs = {Job(2, 1, 0), Job(2, -1, 1, {{0, 0}}), Job(2, 1, 0), Job(2, -1, 1, {{2, 0}})};
  p.makespan_below = 6;
  auto r = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->proved);
  EXPECT_FALSE(r->feasible);
  p.makespan_below = 7;
  r = MinimumMakespan(p, 10'000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->feasible && r->proved);
  EXPECT_EQ(r->makespan, 6);
}

}  // namespace
}  // namespace loom::smt
