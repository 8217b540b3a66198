#ifndef LOOM_SMT_TERM_IMPL_H_
#define LOOM_SMT_TERM_IMPL_H_

// The storage behind smt/term.h: interned atoms, monomials and normal forms.
// Private to smt/ (the solver bridge reads it); other folders use smt/term.h.
//
// A term is a sorted list of (monomial, coefficient) pairs with non-zero
// coefficients; a monomial is a sorted list of (atom, exponent) factors with
// non-zero exponents; monomial 0 is the empty product (the constant 1). Atoms,
// monomials and terms are each interned, so equal structures share one id.
// Invariant: inverse atoms only ever carry positive exponents.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/multiprecision/cpp_int.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "smt/term.h"

namespace loom::smt {

using BigRational = boost::multiprecision::cpp_rational;
using AtomId = int32_t;
using MonoId = int32_t;

enum class AtomKind : uint8_t { kVar, kFn, kInv, kMax, kIndicator };

struct Atom {
  AtomKind kind = AtomKind::kVar;
  std::string name;           // kVar: variable name; kFn: function name
  std::vector<TermId> args;   // kFn: arguments; kInv: {sum}; kMax: sorted terms;
                              // kIndicator: {a, b} with a < b
};

struct Factor {
  AtomId atom = 0;
  int32_t exponent = 0;
  friend bool operator==(const Factor& a, const Factor& b) {
    return a.atom == b.atom && a.exponent == b.exponent;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Factor& f) {
    return H::combine(std::move(h), f.atom, f.exponent);
  }
};

struct Monomial {
  std::vector<Factor> factors;  // sorted by atom id
};

struct TermNode {
  std::vector<MonoId> monos;           // strictly increasing
  std::vector<BigRational> coeffs;     // non-zero, parallel to `monos`
  std::vector<double> coeff_values;    // the coefficients as doubles
  uint64_t hash = 0;
};

// A term under construction: coefficients keyed by monomial.
using MonoMap = absl::flat_hash_map<MonoId, BigRational>;

struct Terms::Impl {
  Impl();

  // ---- storage
  std::vector<Atom> atoms;
  std::vector<Monomial> monos;
  std::vector<TermNode> terms;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<AtomId, 1>> atom_index;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<MonoId, 1>> mono_index;
  absl::flat_hash_map<uint64_t, absl::InlinedVector<TermId, 1>> term_index;
  absl::flat_hash_map<std::pair<MonoId, MonoId>, MonoId> mono_products;
  absl::flat_hash_map<AtomId, TermId> atom_terms;
  absl::flat_hash_map<std::string, NumericFn> functions;

  static constexpr MonoId kUnitMono = 0;

  // ---- interning
  AtomId InternAtom(Atom atom);
  MonoId InternMono(std::vector<Factor> factors);  // factors sorted, exponents != 0
  // `entries` sorted by monomial id, unique, coefficients non-zero.
  TermId InternTerm(std::vector<std::pair<MonoId, BigRational>> entries);
  // Drops zero coefficients, sorts and interns.
  TermId FromMap(MonoMap map);

  // ---- building blocks
  TermId Constant(const BigRational& value);
  TermId AtomTerm(AtomId atom);
  TermId Scale(TermId t, const BigRational& factor);
  MonoId MulMono(MonoId a, MonoId b);
  TermId Multiply(TermId a, TermId b);
  TermId Inverse(TermId a);

  // ---- inspection
  bool IsConstant(TermId t) const;
  // The value of a constant term (0 for the empty sum).
  BigRational ConstantOf(TermId t) const;
  // The atom when `t` is exactly one atom (coefficient 1, exponent 1).
  std::optional<AtomId> AsAtom(TermId t) const;
  // Positive (non-negative) for every assignment, as its form shows: positive
  // coefficients on products of exponentials and inverses of such sums (or zero).
  bool EvidentlyPositive(TermId t) const;
  bool EvidentlyNonNegative(TermId t) const;

  // ---- rewrites of the transcendental functions (smt/term.h, Fn and Mul)
  // exp(x) with every summand c * log(p) of x (c an integer, p evidently positive,
  // or non-negative for c > 0) taken out as p^c.
  TermId Exp(TermId x);
  // a * s where every monomial of `a` holds inv(s'), s = lead * s' an evidently
  // positive sum: a with one inv(s') fewer, times lead. nullopt otherwise.
  std::optional<TermId> CancelInverse(TermId a, TermId s);
};

// The nearest double to `value` (huge or tiny magnitudes included).
double RationalToDouble(const BigRational& value);

}  // namespace loom::smt

#endif  // LOOM_SMT_TERM_IMPL_H_
