#ifndef LOOM_SMT_TERM_H_
#define LOOM_SMT_TERM_H_

// Hash-consed terms over the reals in a canonical normal form.
//
// Every term is kept as a polynomial: a sum of monomials with exact rational
// coefficients, each monomial a product of atoms raised to non-zero integer powers.
// Atoms are variables, applications of uninterpreted functions (exp, log, rsqrt,
// tanh, ...), inverses of sums, n-ary maxima and indicators. Construction
// normalises at once: sums and products are flattened, sorted and merged,
// constants are folded, products are distributed over sums. Two rewrites of the
// softmax's algebra, exact over the reals: exp(c log p + r) = p^c exp(r) for an
// integer c and a p that is evidently positive (sums of exponentials; zero too when
// c > 0), and s * inv(s) = 1 for such a sum s (in Mul). Two terms with the
// same TermId are equal for every assignment; different ids prove nothing (the
// solver decides those, see smt/prove.h).
//
// Exactness: coefficients are arbitrary-precision rationals; a double constant
// is taken at its exact binary value.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom::smt {

using TermId = int32_t;

class Terms {
 public:
  Terms();
  ~Terms();
  Terms(const Terms&) = delete;
  Terms& operator=(const Terms&) = delete;

  // ---- leaves
  TermId Zero();
  TermId One();
  TermId Int(int64_t value);
  TermId Rational(int64_t num, int64_t den);  // den != 0
  // The exact binary value of a finite double. Infinities and NaN become the
  // opaque constants inf(), -inf() and nan() (functions without arguments).
  TermId Double(double value);
  // The variable called `name` (the same id for the same name).
  TermId Var(absl::string_view name);

  // ---- arithmetic (results normalised)
  TermId Add(TermId a, TermId b);
  TermId Sum(absl::Span<const TermId> terms);  // 0 when empty
  TermId Sub(TermId a, TermId b);
  TermId Neg(TermId a);
  TermId Mul(TermId a, TermId b);
  TermId Product(absl::Span<const TermId> terms);  // 1 when empty
  TermId Div(TermId a, TermId b);                  // a * Inv(b)
  // 1/a: a monomial c*x^e inverts to (1/c)*x^-e; a sum becomes an atom inv(sum).
  // Inv(0) is the atom inv(0) (division by zero is left uninterpreted).
  TermId Inv(TermId a);
  TermId PowInt(TermId a, int exponent);  // exponent may be negative; a^0 = 1

  // ---- atoms
  // An uninterpreted function application, e.g. Fn("exp", {x}). Functions with
  // the same name and arity are the same function (congruence).
  TermId Fn(absl::string_view name, absl::Span<const TermId> args);
  // Maximum of the terms: flattened, sorted, duplicates dropped; one term is itself.
  // Constant arguments fold into the largest one. The maximum of no terms is 0.
  TermId Max(absl::Span<const TermId> terms);
  // 1 when a == b, else 0 (a and b are typically integer-valued: token ids,
  // expert indices). Symmetric; Indicator(a, a) = 1; sides that differ by a
  // non-zero constant (two different constants included) give 0.
  TermId Indicator(TermId a, TermId b);

  // ---- inspection
  bool IsConstant(TermId t) const;
  // The constant's value as a double; error when `t` is not constant.
  absl::StatusOr<double> ConstantValue(TermId t) const;
  // Variables the term depends on, sorted by name.
  std::vector<std::string> Variables(TermId t) const;
  std::string ToString(TermId t) const;  // readable infix form
  int64_t size() const;                  // terms stored

  // Numeric value under `vars` (every variable must be bound). Functions known to
  // the evaluator: exp, log, sqrt, rsqrt, tanh, sigmoid, erf, pow_<decimal exponent>
  // and those registered with DefineFunction; others are an error.
  using NumericFn = double (*)(absl::Span<const double> args);
  void DefineFunction(absl::string_view name, NumericFn fn);
  absl::StatusOr<double> Evaluate(TermId t,
                                  const absl::flat_hash_map<std::string, double>& vars) const;

  // The normal form's structure, for the solver bridge (smt/prove.cc).
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::smt

#endif  // LOOM_SMT_TERM_H_
