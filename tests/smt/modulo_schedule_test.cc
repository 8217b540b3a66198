#include "smt/modulo_schedule.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace loom::smt {
namespace {

// Whether offsets place the jobs validly: after each predecessor's end plus its
// lag, and on each device no two jobs in one column modulo the period.
bool Valid(const ModuloProblem& p, const std::vector<int64_t>& s) {
  for (size_t i = 0; i < p.jobs.size(); ++i) {
    for (const auto& [q, lag] : p.jobs[i].preds) {
      if (s[i] < s[q] + p.jobs[q].span + lag) return false;
    }
  }
  for (int d = 0; d < p.num_devices; ++d) {
    std::vector<int> busy(p.period, 0);
    for (size_t i = 0; i < p.jobs.size(); ++i) {
      bool on = false;
      for (int x : p.jobs[i].devices) on |= x == d;
      if (!on) continue;
      for (int64_t k = 0; k < p.jobs[i].span; ++k) {
        if (busy[(s[i] + k) % p.period]++ > 0) return false;
      }
    }
  }
  return true;
}

// Every offset vector below `horizon`, first valid one or none.
bool BruteForce(const ModuloProblem& p, int64_t horizon) {
  const size_t n = p.jobs.size();
  std::vector<int64_t> s(n, 0);
  while (true) {
    if (Valid(p, s)) return true;
    size_t i = 0;
    while (i < n && ++s[i] == horizon) s[i++] = 0;
    if (i == n) return false;
  }
}

// On random small problems the solver, at its default horizon, agrees with
// enumeration: it finds valid offsets exactly when some exist, and proves none
// otherwise.
TEST(ModuloScheduleTest, AgreesWithEnumerationOnSmallProblems) {
  std::mt19937 rng(7);
  int feasible = 0, infeasible = 0;
  for (int round = 0; round < 300; ++round) {
    ModuloProblem p;
    p.num_devices = 2;
    p.period = 1 + static_cast<int64_t>(rng() % 5);
    const int jobs = 2 + static_cast<int>(rng() % 2);
    int64_t longest = 0;
    for (int j = 0; j < jobs; ++j) {
      ModuloJob job;
      job.span = 1 + static_cast<int64_t>(rng() % 3);
      const int devices = static_cast<int>(rng() % 3);  // 0: device 0, 1: device 1, 2: both
      if (devices != 1) job.devices.push_back(0);
      if (devices != 0) job.devices.push_back(1);
      if (j > 0 && rng() % 2 == 0) {
        job.preds.push_back({static_cast<int>(rng() % j), static_cast<int64_t>(rng() % 2)});
      }
      longest += job.span + 1;
      p.jobs.push_back(job);
    }
    // Enumeration reaches further than the solver's default horizon needs to: its
    // "none" must stay a proof.
    const int64_t horizon = longest + p.period * jobs;
    bool proved_none = false;
    auto got = FindModuloOffsets(p, ModuloLimits{}, &proved_none);
    ASSERT_TRUE(got.ok()) << got.status();
    const bool exists = BruteForce(p, horizon);
    if (exists) {
      ++feasible;
      ASSERT_TRUE(got->has_value()) << "round " << round;
      EXPECT_TRUE(Valid(p, **got)) << "round " << round;
    } else {
      ++infeasible;
      EXPECT_FALSE(got->has_value()) << "round " << round;
      EXPECT_TRUE(proved_none) << "round " << round;
    }
  }
  EXPECT_GT(feasible, 50);
  EXPECT_GT(infeasible, 20);
}

// A block longer than the period, or a device with more work than it, has none.
TEST(ModuloScheduleTest, TooMuchWorkHasNone) {
  ModuloProblem p;
  p.num_devices = 1;
  p.period = 3;
  p.jobs = {ModuloJob{2, {0}, {}}, ModuloJob{2, {0}, {}}};
  bool proved_none = false;
  auto got = FindModuloOffsets(p, ModuloLimits{}, &proved_none);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_TRUE(proved_none);
  p.period = 4;
  got = FindModuloOffsets(p, ModuloLimits{}, &proved_none);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_TRUE(Valid(p, **got));
}

}  // namespace
}  // namespace loom::smt
