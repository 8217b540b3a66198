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

// No false alarms: every plan of the transform's strategy matrix is proved
// equivalent, laws and schedule included.
class VerifyMatrixTest : public ::testing::TestWithParam<::loom::testing::Case> {};

TEST_P(VerifyMatrixTest, IsProvedEquivalent) {
  const auto& c = GetParam();
  ir::Graph spec = TinyStep(c.model, c.strategy.microbatches, c.layers,
                            c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  auto plan = transform::Parallelize(spec, c.strategy);
  ASSERT_TRUE(plan.ok()) << plan.status();
  VerifyOptions options;
  options.threads = 1;
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->failures.empty()) << Reasons(*r).substr(0, 3000);
  EXPECT_EQ(r->verdict, Verdict::kEquivalent) << Reasons(*r).substr(0, 3000);
  EXPECT_EQ(ExitCode(r->verdict), 0);
  EXPECT_EQ(r->laws_proved, static_cast<int64_t>(r->laws.size()));
}

// A token-split routing piece whose attributes route its tokens differently from
// the op (one group with the capacity of two, where the op routes each sequence
// on its own) is never proved: the derivation refutes it at its place.
TEST(VerifyTest, RoutingPieceWithWrongGroupsIsNotProved) {
  const auto s = Make(2, 1, 1, 2);  // moe_dp2 of the strategy matrix
  ir::Graph spec = TinyStep("deepseek-v3-671b", s.microbatches, /*layers=*/0, 2 * s.dp);
  auto plan = transform::Parallelize(spec, s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int mutated = 0;
  for (ir::Task& t : plan->tasks) {
    if (t.kind != ir::OpKind::kMoeDispatch) continue;
    auto groups = t.attrs.GetInt("groups");
    auto capacity = t.attrs.GetInt("capacity");
    ASSERT_TRUE(groups.ok() && capacity.ok());
    ASSERT_GT(*groups, 1) << "the piece holds one sequence";
    // Same slot columns (groups x capacity), different routing.
    t.attrs.Set("groups", int64_t{1});
    t.attrs.Set("capacity", *groups * *capacity);
    ++mutated;
    break;
  }
  ASSERT_EQ(mutated, 1);
  VerifyOptions options;
  options.threads = 1;
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kNotEquivalent) << Reasons(*r).substr(0, 3000);
  EXPECT_NE(Reasons(*r).find("moe_dispatch"), std::string::npos) << Reasons(*r).substr(0, 3000);
}

INSTANTIATE_TEST_SUITE_P(Strategies, VerifyMatrixTest,
                         ::testing::ValuesIn(::loom::testing::Matrix()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::verify
