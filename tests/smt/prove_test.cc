#include "smt/prove.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::smt {
namespace {

// Goals whose sides share an id hold without the solver.
TEST(ProveTest, IdenticalIdsNeedNoSolver) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y"), z = t.Var("z");
  ProofResult r = ProveEqual(t, {{t.Mul(x, t.Add(y, z)), t.Add(t.Mul(x, y), t.Mul(x, z))},
                                 {t.Add(x, y), t.Add(y, x)}});
  EXPECT_EQ(r.verdict, Verdict::kValid);
  EXPECT_EQ(r.solver_calls, 0);
  EXPECT_EQ(r.failed_goal, -1);
  EXPECT_EQ(ProveEqual(t, {}).verdict, Verdict::kValid);
}

// A 2x4 by 4x2 matmul split along the reduction dimension sums back to the whole.
TEST(ProveTest, MatmulPartialSumsEqualFullSum) {
  Terms t;
  auto a = [&](int i, int k) { return t.Var(absl::StrCat("a", i, k)); };
  auto b = [&](int k, int j) { return t.Var(absl::StrCat("b", k, j)); };
  auto partial = [&](int i, int j, int begin, int end) {
    std::vector<TermId> products;
    for (int k = begin; k < end; ++k) products.push_back(t.Mul(a(i, k), b(k, j)));
    return t.Sum(products);
  };
  std::vector<Goal> goals;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      goals.push_back({t.Add(partial(i, j, 0, 2), partial(i, j, 2, 4)), partial(i, j, 0, 4)});
    }
  }
  ProofResult r = ProveEqual(t, goals);
  EXPECT_EQ(r.verdict, Verdict::kValid) << r.detail;
}

// Identities over maxima and indicators that the normal form leaves open are
// proved by the solver.
TEST(ProveTest, SolverProvesMaxAndIndicatorIdentities) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b");
  std::vector<Goal> goals = {
      // max(a, b) = a + max(0, b - a)
      {t.Max({a, b}), t.Add(a, t.Max({t.Zero(), t.Sub(b, a)}))},
      // [a == b] * a = [a == b] * b
      {t.Mul(t.Indicator(a, b), a), t.Mul(t.Indicator(a, b), b)},
      // exp of equal arguments under an indicator
      {t.Mul(t.Indicator(a, b), t.Fn("exp", {a})), t.Mul(t.Indicator(a, b), t.Fn("exp", {b}))},
  };
  ProofResult r = ProveEqual(t, goals);
  EXPECT_EQ(r.verdict, Verdict::kValid) << r.detail;
  EXPECT_EQ(r.solver_calls, 3);
}

// Softmax weights sum to one: needs exp > 0 so the denominator is non-zero.
TEST(ProveTest, ProvesSoftmaxWeightsSumToOne) {
  Terms t;
  TermId ea = t.Fn("exp", {t.Var("a")}), eb = t.Fn("exp", {t.Var("b")});
  TermId denominator = t.Add(ea, eb);
  TermId total = t.Add(t.Div(ea, denominator), t.Div(eb, denominator));
  ProofResult r = ProveEqual(t, {{total, t.One()}});
  EXPECT_EQ(r.verdict, Verdict::kValid) << r.detail;
  EXPECT_EQ(r.solver_calls, 1);
}

// A goal false only where two values coincide escapes the sample points: the
// solver finds the counterexample, and evaluation confirms it.
TEST(ProveTest, SolverFindsCounterexampleSamplingMisses) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y");
  std::vector<Goal> goals = {{t.Indicator(x, y), t.Zero()}};
  ProofResult r = ProveEqual(t, goals);
  ASSERT_EQ(r.verdict, Verdict::kInvalid) << r.detail;
  EXPECT_EQ(r.solver_calls, 1);
  EXPECT_EQ(r.counterexample.at("x"), r.counterexample.at("y"));
  EXPECT_EQ(r.lhs_value, 1);
}

// A wrong goal is refuted with a counterexample that evaluation confirms.
TEST(ProveTest, RefutesWrongGoalWithConfirmedCounterexample) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y");
  std::vector<Goal> goals = {{t.Add(x, x), t.Mul(t.Int(2), x)}, {t.Add(x, y), x}};
  ProofResult r = ProveEqual(t, goals);
  ASSERT_EQ(r.verdict, Verdict::kInvalid) << r.detail;
  EXPECT_EQ(r.failed_goal, 1);
  EXPECT_EQ(r.solver_calls, 0);  // refuted at a sample point, before the solver
  ASSERT_TRUE(r.counterexample.contains("y"));
  absl::StatusOr<double> lhs = t.Evaluate(goals[1].lhs, r.counterexample);
  absl::StatusOr<double> rhs = t.Evaluate(goals[1].rhs, r.counterexample);
  ASSERT_TRUE(lhs.ok() && rhs.ok());
  EXPECT_NE(*lhs, *rhs);
  EXPECT_EQ(*lhs, r.lhs_value);
  EXPECT_EQ(*rhs, r.rhs_value);
}

// A goal true for the real exp but not for an arbitrary function is unknown:
// neither proved nor refuted.
TEST(ProveTest, UninterpretedOnlyCounterexampleIsUnknown) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b");
  ProofResult r = ProveEqual(
      t, {{t.Mul(t.Fn("exp", {a}), t.Fn("exp", {b})), t.Fn("exp", {t.Add(a, b)})}});
  EXPECT_NE(r.verdict, Verdict::kValid);
  EXPECT_NE(r.verdict, Verdict::kInvalid);
  EXPECT_EQ(r.failed_goal, 0);
  EXPECT_FALSE(r.detail.empty());
}

// A counterexample through division by zero is not reported as invalid.
TEST(ProveTest, DivisionByZeroModelIsUnknown) {
  Terms t;
  TermId s = t.Add(t.Var("x"), t.Var("y"));
  ProofResult r = ProveEqual(t, {{t.Div(s, s), t.One()}});
  EXPECT_EQ(r.verdict, Verdict::kUnknown) << r.detail;
}

// Running out of time is unknown, never valid.
TEST(ProveTest, TimeoutIsUnknown) {
  Terms t;
  std::vector<TermId> xs;
  for (int i = 0; i < 6; ++i) xs.push_back(t.Var(absl::StrCat("x", i)));
  // p = sum of squares of products: p >= 0, so max(p, 0) = p, but showing it
  // takes non-linear reasoning.
  std::vector<TermId> squares;
  for (int i = 0; i < 6; ++i) {
    TermId d = t.Sub(t.Mul(xs[i], xs[(i + 1) % 6]), t.Mul(xs[(i + 2) % 6], xs[(i + 3) % 6]));
    squares.push_back(t.Mul(d, d));
  }
  TermId p = t.Sum(squares);
  SolverOptions options;
  options.timeout_ms = 1;
  ProofResult r = ProveEqual(t, {{t.Max({p, t.Zero()}), p}}, options);
  EXPECT_EQ(r.verdict, Verdict::kUnknown) << r.detail;
  EXPECT_EQ(r.failed_goal, 0);
}

}  // namespace
}  // namespace loom::smt
