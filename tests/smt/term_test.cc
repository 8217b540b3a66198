#include "smt/term.h"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::smt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

double Twice(absl::Span<const double> args) { return 2 * args[0]; }

// Sums are flattened and sorted: grouping and order do not matter.
TEST(TermTest, SumsAreAssociativeAndCommutative) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b"), c = t.Var("c");
  EXPECT_EQ(t.Add(t.Add(a, b), c), t.Add(c, t.Add(b, a)));
  EXPECT_EQ(t.Sum({a, b, c}), t.Sum({c, a, b}));
  EXPECT_EQ(t.Mul(t.Mul(a, b), c), t.Mul(c, t.Mul(b, a)));
}

// Products distribute over sums.
TEST(TermTest, ProductsDistributeOverSums) {
  Terms t;
  TermId x = t.Var("x"), a = t.Var("a"), b = t.Var("b");
  EXPECT_EQ(t.Mul(x, t.Add(a, b)), t.Add(t.Mul(x, a), t.Mul(x, b)));
  // (a + b)^2 = a^2 + 2ab + b^2
  TermId square = t.PowInt(t.Add(a, b), 2);
  TermId expanded = t.Sum({t.Mul(a, a), t.Mul(t.Int(2), t.Mul(a, b)), t.Mul(b, b)});
  EXPECT_EQ(square, expanded);
  EXPECT_EQ(t.Mul(t.Add(a, b), t.Sub(a, b)), t.Sub(t.Mul(a, a), t.Mul(b, b)));
}

// Constants fold and like terms merge.
TEST(TermTest, FoldsConstantsAndCancelsLikeTerms) {
  Terms t;
  TermId x = t.Var("x");
  EXPECT_EQ(t.Add(t.Int(2), t.Int(3)), t.Int(5));
  EXPECT_EQ(t.Mul(t.Int(2), t.Int(3)), t.Int(6));
  EXPECT_EQ(t.Sub(x, x), t.Zero());
  EXPECT_EQ(t.Add(x, t.Neg(x)), t.Zero());
  EXPECT_EQ(t.Add(x, x), t.Mul(t.Int(2), x));
  EXPECT_EQ(t.Mul(x, t.Zero()), t.Zero());
  EXPECT_EQ(t.Mul(x, t.One()), x);
  EXPECT_EQ(t.Sum({}), t.Zero());
  EXPECT_EQ(t.Product({}), t.One());
  EXPECT_TRUE(t.IsConstant(t.Add(t.Int(2), t.Int(3))));
  EXPECT_FALSE(t.IsConstant(x));
  EXPECT_EQ(*t.ConstantValue(t.Int(-7)), -7.0);
  EXPECT_FALSE(t.ConstantValue(x).ok());
}

// Coefficients are exact rationals.
TEST(TermTest, RationalArithmeticIsExact) {
  Terms t;
  EXPECT_EQ(t.Add(t.Rational(1, 3), t.Rational(1, 6)), t.Rational(1, 2));
  EXPECT_EQ(t.Rational(2, 4), t.Rational(-1, -2));
  EXPECT_EQ(t.Mul(t.Rational(2, 3), t.Int(3)), t.Int(2));
  EXPECT_EQ(t.Div(t.Int(1), t.Int(3)), t.Rational(1, 3));
  EXPECT_DOUBLE_EQ(*t.ConstantValue(t.Rational(1, 3)), 1.0 / 3.0);
}

// A double is taken at its exact binary value.
TEST(TermTest, DoubleIsExactBinaryValue) {
  Terms t;
  EXPECT_NE(t.Double(0.1), t.Rational(1, 10));
  EXPECT_EQ(t.Double(0.5), t.Rational(1, 2));
  EXPECT_EQ(t.Double(-3.0), t.Int(-3));
  EXPECT_EQ(t.Double(0.0), t.Zero());
  EXPECT_EQ(t.Double(1e300), t.Double(1e300));
  EXPECT_EQ(*t.ConstantValue(t.Double(0.1)), 0.1);
  EXPECT_EQ(*t.ConstantValue(t.Double(1e-310)), 1e-310);
  EXPECT_EQ(*t.ConstantValue(t.Double(-1.7e308)), -1.7e308);
  // 0.1 + 0.2 in exact arithmetic is not the double 0.3.
  EXPECT_NE(t.Add(t.Double(0.1), t.Double(0.2)), t.Double(0.3));
}

// Inverses of monomials become negative exponents; sums become inverse atoms.
TEST(TermTest, InvertsMonomials) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y");
  EXPECT_EQ(t.Div(x, x), t.One());
  EXPECT_EQ(t.Inv(t.Mul(t.Int(2), x)), t.Mul(t.Rational(1, 2), t.Inv(x)));
  EXPECT_EQ(t.Inv(t.Inv(x)), x);
  EXPECT_EQ(t.Mul(t.Div(x, y), y), x);
  EXPECT_EQ(t.PowInt(x, -2), t.Inv(t.Mul(x, x)));
  EXPECT_EQ(t.PowInt(x, 0), t.One());
  TermId s = t.Add(x, y);
  EXPECT_EQ(t.Inv(t.Inv(s)), s);
  EXPECT_EQ(t.Inv(t.Mul(t.Int(3), s)), t.Mul(t.Rational(1, 3), t.Inv(s)));
  EXPECT_NE(t.Div(s, s), t.One());  // inv(x + y) is an atom
  EXPECT_EQ(t.ToString(t.Inv(t.Zero())), "inv(0)");
}

// Maxima are flattened, sorted, deduplicated; constants fold.
TEST(TermTest, MaxFlattensAndDeduplicates) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b"), c = t.Var("c");
  EXPECT_EQ(t.Max({a}), a);
  EXPECT_EQ(t.Max({a, a}), a);
  EXPECT_EQ(t.Max({t.Max({a, b}), c}), t.Max({c, b, a, b}));
  EXPECT_EQ(t.Max({t.Int(1), t.Int(3), t.Int(2)}), t.Int(3));
  EXPECT_EQ(t.Max({a, t.Int(1), t.Max({t.Int(2), b})}), t.Max({b, a, t.Int(2)}));
}

// Indicators are symmetric; equal sides give 1, different constants 0.
TEST(TermTest, IndicatorRules) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b");
  EXPECT_EQ(t.Indicator(a, b), t.Indicator(b, a));
  EXPECT_EQ(t.Indicator(a, a), t.One());
  EXPECT_EQ(t.Indicator(t.Int(1), t.Int(2)), t.Zero());
  EXPECT_EQ(t.Indicator(t.Int(2), t.Add(t.Int(1), t.Int(1))), t.One());
  EXPECT_EQ(t.Indicator(a, t.Add(a, t.One())), t.Zero());
  EXPECT_FALSE(t.IsConstant(t.Indicator(a, t.Int(3))));
}

// Function applications are congruent in their normalised arguments.
TEST(TermTest, FunctionApplicationsAreCongruent) {
  Terms t;
  TermId a = t.Var("a"), b = t.Var("b");
  EXPECT_EQ(t.Fn("exp", {t.Add(a, b)}), t.Fn("exp", {t.Add(b, a)}));
  EXPECT_NE(t.Fn("exp", {a}), t.Fn("log", {a}));
  EXPECT_NE(t.Fn("f", {a, b}), t.Fn("f", {b, a}));
}

// Equal normal forms share one id, and ids do not change.
TEST(TermTest, HashConsingKeepsIdsStable) {
  Terms t;
  TermId x = t.Var("x");
  TermId e1 = t.Add(t.Mul(x, x), t.Int(1));
  const int64_t size = t.size();
  TermId e2 = t.Add(t.Int(1), t.Mul(x, x));
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(t.size(), size);
  EXPECT_EQ(t.Var("x"), x);
  EXPECT_EQ(t.ToString(e1), t.ToString(e2));
}

// Evaluate knows the listed functions and user ones.
TEST(TermTest, EvaluatesFunctions) {
  Terms t;
  TermId x = t.Var("x");
  absl::flat_hash_map<std::string, double> vars = {{"x", 0.7}};
  auto eval = [&](absl::string_view fn) { return *t.Evaluate(t.Fn(fn, {x}), vars); };
  EXPECT_DOUBLE_EQ(eval("exp"), std::exp(0.7));
  EXPECT_DOUBLE_EQ(eval("log"), std::log(0.7));
  EXPECT_DOUBLE_EQ(eval("sqrt"), std::sqrt(0.7));
  EXPECT_DOUBLE_EQ(eval("rsqrt"), 1 / std::sqrt(0.7));
  EXPECT_DOUBLE_EQ(eval("tanh"), std::tanh(0.7));
  EXPECT_DOUBLE_EQ(eval("sigmoid"), 1 / (1 + std::exp(-0.7)));
  EXPECT_DOUBLE_EQ(eval("erf"), std::erf(0.7));
  EXPECT_DOUBLE_EQ(eval("pow_0.5"), std::pow(0.7, 0.5));
  EXPECT_DOUBLE_EQ(eval("pow_3"), std::pow(0.7, 3));
  EXPECT_FALSE(t.Evaluate(t.Fn("mystery", {x}), vars).ok());
  t.DefineFunction("twice", &Twice);
  EXPECT_DOUBLE_EQ(eval("twice"), 1.4);
}

// Evaluate handles every atom kind and reports unbound variables.
TEST(TermTest, EvaluatesAtomsAndRejectsUnboundVariables) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y");
  absl::flat_hash_map<std::string, double> vars = {{"x", 2}, {"y", 3}};
  TermId e = t.Sum({t.Mul(t.Rational(1, 2), t.Mul(x, y)), t.Inv(t.Add(x, y)),
                    t.Max({x, y}), t.Indicator(x, y), t.PowInt(x, -2)});
  EXPECT_DOUBLE_EQ(*t.Evaluate(e, vars), 3 + 1.0 / 5 + 3 + 0 + 0.25);
  EXPECT_DOUBLE_EQ(*t.Evaluate(t.Indicator(x, y), {{"x", 4}, {"y", 4}}), 1.0);
  absl::StatusOr<double> unbound = t.Evaluate(t.Add(x, t.Var("z")), vars);
  ASSERT_FALSE(unbound.ok());
  EXPECT_THAT(unbound.status().message(), HasSubstr("z"));
}

// Variables are listed once each, sorted, including those inside atoms.
TEST(TermTest, ListsVariables) {
  Terms t;
  TermId e = t.Add(t.Fn("exp", {t.Var("c")}), t.Mul(t.Var("b"), t.Inv(t.Add(t.Var("a"),
                                                                         t.Var("b")))));
  EXPECT_THAT(t.Variables(e), ElementsAre("a", "b", "c"));
  EXPECT_TRUE(t.Variables(t.Int(3)).empty());
}

// Printing is infix and deterministic.
TEST(TermTest, PrintsInfix) {
  Terms t;
  TermId x = t.Var("x"), y = t.Var("y");
  EXPECT_EQ(t.ToString(t.Zero()), "0");
  EXPECT_EQ(t.ToString(t.Rational(-1, 3)), "-1/3");
  EXPECT_EQ(t.ToString(t.Sub(t.Mul(t.Int(2), x), y)), "2*x - y");
  EXPECT_EQ(t.ToString(t.Mul(t.Rational(1, 3), t.Mul(x, x))), "(1/3)*x^2");
  EXPECT_EQ(t.ToString(t.Div(x, y)), "x*y^-1");
  EXPECT_EQ(t.ToString(t.Fn("exp", {t.Add(x, y)})), "exp(x + y)");
  EXPECT_EQ(t.ToString(t.Max({x, y})), "max(x, y)");
  EXPECT_EQ(t.ToString(t.Indicator(x, y)), "[x == y]");
}

// Large sums of products are built quickly.
TEST(TermTest, BuildsLargeSumsQuickly) {
  Terms t;
  const auto start = std::chrono::steady_clock::now();
  std::vector<TermId> products;
  for (int i = 0; i < 2000; ++i) {
    products.push_back(t.Mul(t.Var(absl::StrCat("a", i)), t.Var(absl::StrCat("b", i % 50))));
  }
  TermId sum = t.Sum(products);
  // Splitting into two halves and adding gives the same id.
  TermId left = t.Sum(absl::MakeSpan(products).subspan(0, 1000));
  TermId right = t.Sum(absl::MakeSpan(products).subspan(1000));
  EXPECT_EQ(t.Add(left, right), sum);
  // A product of two 100-monomial sums: 10,000 monomials merged at once.
  std::vector<TermId> xs, ys;
  for (int i = 0; i < 100; ++i) {
    xs.push_back(t.Var(absl::StrCat("x", i)));
    ys.push_back(t.Var(absl::StrCat("y", i)));
  }
  TermId big = t.Mul(t.Sum(xs), t.Sum(ys));
  EXPECT_EQ(t.Sub(big, big), t.Zero());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.5);
}

}  // namespace
}  // namespace loom::smt
