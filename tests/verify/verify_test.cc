#include "verify/verify.h"

#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

std::string Reasons(const VerifyReport& r) {
  std::string s;
  for (const Failure& f : r.failures) {
    absl::StrAppend(&s, FailureClassName(f.cls), " ", f.item, ": ", f.message, "\n");
  }
  for (const Undecided& u : r.undecided) absl::StrAppend(&s, "undecided ", u.item, ": ", u.reason, "\n");
  return s;
}

TEST(VerifyTest, TensorParallelGpt2IsProvedEquivalent) {
  ir::Graph spec = TinyStep("gpt2", 1);
  auto plan = transform::Parallelize(spec, Make(1, 2, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto r = Verify(spec, *plan);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kEquivalent) << Reasons(*r).substr(0, 3000);
  for (const LawResult& l : r->laws) {
    if (l.seconds > 0.5) std::cerr << l.seconds << " s " << l.key.substr(0, 200) << "\n";
  }
  EXPECT_EQ(r->laws_proved, static_cast<int64_t>(r->laws.size()));
}

}  // namespace
}  // namespace loom::verify
