#include "smt/solver.h"

#include "gtest/gtest.h"

namespace loom::smt {
namespace {

// A polynomial identity over the reals is proved valid.
TEST(SolverTest, ProvesBinomialIdentity) {
  auto r = CheckValidity(R"(
    (declare-const x Real)
    (declare-const y Real)
    (assert (= (* (+ x y) (+ x y)) (+ (* x x) (* 2.0 x y) (* y y))))
  )");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kValid);
}

// A false identity is refuted with a counterexample.
TEST(SolverTest, RefutesWrongIdentityWithModel) {
  auto r = CheckValidity(R"(
    (declare-const x Real)
    (declare-const y Real)
    (assert (= (* x y) (+ x y)))
  )");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kInvalid);
  EXPECT_NE(r->detail.find("x"), std::string::npos);
}

// Malformed SMT-LIB is an input error, not a verdict.
TEST(SolverTest, RejectsMalformedScript) {
  auto r = CheckValidity("(assert (= x");
  EXPECT_FALSE(r.ok());
}

// The linked Z3 reports a 4.x version.
TEST(SolverTest, ReportsZ3Version) { EXPECT_EQ(Z3Version().substr(0, 2), "4."); }

}  // namespace
}  // namespace loom::smt
