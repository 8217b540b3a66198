// Progress reports of Verify: from the calling thread, counts that only grow, and a
// last report that matches the finished report.

#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

// The last progress report counts every law; earlier ones never count more.
TEST(VerifyProgressTest, LastReportMatchesTheReport) {
  ir::Graph spec = TinyStep("gpt2", 1, /*layers=*/1);
  auto plan = transform::Parallelize(spec, Make(1, 1, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Progress> seen;
  VerifyOptions options;
  options.threads = 2;
  options.progress = [&](const Progress& p) { seen.push_back(p); };
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(seen.empty());
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].laws_done, seen[i - 1].laws_done);
    EXPECT_GE(seen[i].laws_proved, seen[i - 1].laws_proved);
  }
  const Progress& last = seen.back();
  EXPECT_GT(last.laws_total, 0);
  EXPECT_EQ(last.laws_total, static_cast<int64_t>(r->laws.size()));
  EXPECT_EQ(last.laws_done, last.laws_total);
  EXPECT_EQ(last.laws_proved, r->laws_proved);
  EXPECT_EQ(last.cache_hits, r->cache_hits);
}

}  // namespace
}  // namespace loom::verify
