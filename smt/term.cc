// Construction and normalisation of terms (smt/term.h). Inspection, printing and
// numeric evaluation are in smt/term_eval.cc.

#include "smt/term.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "smt/term_impl.h"

namespace loom::smt {
namespace {

using boost::multiprecision::cpp_int;

uint64_t HashAtom(const Atom& atom) {
  return absl::Hash<std::tuple<int, absl::string_view, const std::vector<TermId>&>>()(
      std::tuple<int, absl::string_view, const std::vector<TermId>&>(
          static_cast<int>(atom.kind), atom.name, atom.args));
}

bool SameAtom(const Atom& a, const Atom& b) {
  return a.kind == b.kind && a.name == b.name && a.args == b.args;
}

uint64_t HashEntries(const std::vector<MonoId>& monos, const std::vector<double>& values) {
  return absl::Hash<std::pair<const std::vector<MonoId>&, const std::vector<double>&>>()(
      std::pair<const std::vector<MonoId>&, const std::vector<double>&>(monos, values));
}

// base^exponent for a non-negative exponent.
BigRational PowRational(const BigRational& base, int64_t exponent) {
  BigRational result = 1;
  BigRational b = base;
  while (exponent > 0) {
    if (exponent & 1) result *= b;
    exponent >>= 1;
    if (exponent > 0) b *= b;
  }
  return result;
}

}  // namespace

double RationalToDouble(const BigRational& value) {
  const cpp_int num = boost::multiprecision::numerator(value);
  const cpp_int den = boost::multiprecision::denominator(value);
  if (num == 0) return 0.0;
  const cpp_int abs_num = num < 0 ? cpp_int(-num) : num;
  const int64_t num_bits = static_cast<int64_t>(boost::multiprecision::msb(abs_num));
  const int64_t den_bits = static_cast<int64_t>(boost::multiprecision::msb(den));
  if (num_bits < 53 && den_bits < 53) {
    // Both are exact doubles; one division rounds correctly.
    return num.convert_to<double>() / den.convert_to<double>();
  }
  // Keep 64 significant bits of the quotient, then scale by a power of two.
  const int64_t shift = 64 - (num_bits - den_bits);
  cpp_int q = shift >= 0 ? cpp_int((abs_num << static_cast<unsigned>(shift)) / den)
                         : cpp_int(abs_num / (den << static_cast<unsigned>(-shift)));
  const double magnitude = std::ldexp(q.convert_to<double>(), static_cast<int>(-shift));
  return num < 0 ? -magnitude : magnitude;
}

// ---------------------------------------------------------------- interning

Terms::Impl::Impl() {
  monos.push_back(Monomial{});  // kUnitMono
  mono_index[absl::Hash<std::vector<Factor>>()(monos[0].factors)].push_back(kUnitMono);
  InternTerm({});                      // Zero()
  InternTerm({{kUnitMono, BigRational(1)}});  // One()
}

AtomId Terms::Impl::InternAtom(Atom atom) {
  const uint64_t hash = HashAtom(atom);
  auto& bucket = atom_index[hash];
  for (AtomId id : bucket) {
    if (SameAtom(atoms[id], atom)) return id;
  }
  const AtomId id = static_cast<AtomId>(atoms.size());
  atoms.push_back(std::move(atom));
  bucket.push_back(id);
  return id;
}

MonoId Terms::Impl::InternMono(std::vector<Factor> factors) {
  const uint64_t hash = absl::Hash<std::vector<Factor>>()(factors);
  auto& bucket = mono_index[hash];
  for (MonoId id : bucket) {
    if (monos[id].factors == factors) return id;
  }
  const MonoId id = static_cast<MonoId>(monos.size());
  monos.push_back(Monomial{std::move(factors)});
  bucket.push_back(id);
  return id;
}

TermId Terms::Impl::InternTerm(std::vector<std::pair<MonoId, BigRational>> entries) {
  TermNode node;
  node.monos.reserve(entries.size());
  node.coeffs.reserve(entries.size());
  node.coeff_values.reserve(entries.size());
  for (auto& [mono, coeff] : entries) {
    node.monos.push_back(mono);
    node.coeff_values.push_back(RationalToDouble(coeff));
    node.coeffs.push_back(std::move(coeff));
  }
  node.hash = HashEntries(node.monos, node.coeff_values);
  auto& bucket = term_index[node.hash];
  for (TermId id : bucket) {
    const TermNode& other = terms[id];
    if (other.monos == node.monos && other.coeffs == node.coeffs) return id;
  }
  const TermId id = static_cast<TermId>(terms.size());
  terms.push_back(std::move(node));
  bucket.push_back(id);
  return id;
}

TermId Terms::Impl::FromMap(MonoMap map) {
  std::vector<std::pair<MonoId, BigRational>> entries;
  entries.reserve(map.size());
  for (auto& [mono, coeff] : map) {
    if (coeff != 0) entries.emplace_back(mono, std::move(coeff));
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return InternTerm(std::move(entries));
}

// ---------------------------------------------------------------- building blocks

TermId Terms::Impl::Constant(const BigRational& value) {
  if (value == 0) return InternTerm({});
  return InternTerm({{kUnitMono, value}});
}

TermId Terms::Impl::AtomTerm(AtomId atom) {
  auto it = atom_terms.find(atom);
  if (it != atom_terms.end()) return it->second;
  const MonoId mono = InternMono({Factor{atom, 1}});
  const TermId id = InternTerm({{mono, BigRational(1)}});
  atom_terms[atom] = id;
  return id;
}

TermId Terms::Impl::Scale(TermId t, const BigRational& factor) {
  if (factor == 0) return Constant(0);
  if (factor == 1) return t;
  const TermNode& node = terms[t];
  std::vector<std::pair<MonoId, BigRational>> entries;
  entries.reserve(node.monos.size());
  for (size_t i = 0; i < node.monos.size(); ++i) {
    entries.emplace_back(node.monos[i], node.coeffs[i] * factor);
  }
  return InternTerm(std::move(entries));
}

MonoId Terms::Impl::MulMono(MonoId a, MonoId b) {
  if (a == kUnitMono) return b;
  if (b == kUnitMono) return a;
  const std::pair<MonoId, MonoId> key(std::min(a, b), std::max(a, b));
  auto it = mono_products.find(key);
  if (it != mono_products.end()) return it->second;
  const std::vector<Factor>& fa = monos[a].factors;
  const std::vector<Factor>& fb = monos[b].factors;
  std::vector<Factor> out;
  out.reserve(fa.size() + fb.size());
  size_t i = 0, j = 0;
  while (i < fa.size() || j < fb.size()) {
    if (j == fb.size() || (i < fa.size() && fa[i].atom < fb[j].atom)) {
      out.push_back(fa[i++]);
    } else if (i == fa.size() || fb[j].atom < fa[i].atom) {
      out.push_back(fb[j++]);
    } else {
      const int32_t e = fa[i].exponent + fb[j].exponent;
      if (e != 0) out.push_back(Factor{fa[i].atom, e});
      ++i;
      ++j;
    }
  }
  const MonoId result = InternMono(std::move(out));
  mono_products[key] = result;
  return result;
}

TermId Terms::Impl::Multiply(TermId a, TermId b) {
  if (IsConstant(a)) return Scale(b, ConstantOf(a));
  if (IsConstant(b)) return Scale(a, ConstantOf(b));
  const size_t na = terms[a].monos.size();
  const size_t nb = terms[b].monos.size();
  MonoMap map;
  map.reserve(std::min<size_t>(na * nb, size_t{1} << 16));
  for (size_t i = 0; i < na; ++i) {
    for (size_t j = 0; j < nb; ++j) {
      // MulMono may grow `monos` but never `terms`, so these references stay valid.
      const TermNode& ta = terms[a];
      const TermNode& tb = terms[b];
      const MonoId m = MulMono(ta.monos[i], tb.monos[j]);
      BigRational c = ta.coeffs[i] * tb.coeffs[j];
      auto [it, inserted] = map.try_emplace(m, std::move(c));
      if (!inserted) it->second += ta.coeffs[i] * tb.coeffs[j];
    }
  }
  return FromMap(std::move(map));
}

TermId Terms::Impl::Inverse(TermId a) {
  const TermNode& node = terms[a];
  if (node.monos.empty()) {
    return AtomTerm(InternAtom(Atom{AtomKind::kInv, "", {a}}));
  }
  if (node.monos.size() == 1) {
    // (c * prod x^e)^-1 = (1/c) * prod x^-e, with inv(s)^-e written as s^e.
    const BigRational inv_coeff = BigRational(1) / node.coeffs[0];
    const std::vector<Factor> factors = monos[node.monos[0]].factors;
    std::vector<Factor> flipped;
    std::vector<std::pair<TermId, int32_t>> restored;
    for (const Factor& f : factors) {
      if (atoms[f.atom].kind == AtomKind::kInv) {
        restored.emplace_back(atoms[f.atom].args[0], f.exponent);
      } else {
        flipped.push_back(Factor{f.atom, -f.exponent});
      }
    }
    const MonoId mono = InternMono(std::move(flipped));
    TermId result = InternTerm({{mono, inv_coeff}});
    for (const auto& [sum, exponent] : restored) {
      for (int32_t k = 0; k < exponent; ++k) result = Multiply(result, sum);
    }
    return result;
  }
  // A proper sum: 1/(c*s) = (1/c) * inv(s), with s's first coefficient made 1.
  const BigRational lead = node.coeffs[0];
  const TermId normalised = Scale(a, BigRational(1) / lead);
  const TermId atom = AtomTerm(InternAtom(Atom{AtomKind::kInv, "", {normalised}}));
  return Scale(atom, BigRational(1) / lead);
}

bool Terms::Impl::IsConstant(TermId t) const {
  const TermNode& node = terms[t];
  return node.monos.empty() || (node.monos.size() == 1 && node.monos[0] == kUnitMono);
}

BigRational Terms::Impl::ConstantOf(TermId t) const {
  const TermNode& node = terms[t];
  if (node.monos.empty()) return BigRational(0);
  return node.coeffs[0];
}

std::optional<AtomId> Terms::Impl::AsAtom(TermId t) const {
  const TermNode& node = terms[t];
  if (node.monos.size() != 1 || node.coeffs[0] != 1) return std::nullopt;
  const Monomial& mono = monos[node.monos[0]];
  if (mono.factors.size() != 1 || mono.factors[0].exponent != 1) return std::nullopt;
  return mono.factors[0].atom;
}

bool Terms::Impl::EvidentlyPositive(TermId t) const {
  const TermNode& node = terms[t];
  if (node.monos.empty()) return false;
  for (size_t i = 0; i < node.monos.size(); ++i) {
    if (node.coeffs[i] <= 0) return false;
    for (const Factor& f : monos[node.monos[i]].factors) {
      const Atom& atom = atoms[f.atom];
      const bool exp = atom.kind == AtomKind::kFn && atom.name == "exp" && atom.args.size() == 1;
      const bool inv = atom.kind == AtomKind::kInv && EvidentlyPositive(atom.args[0]);
      if (!exp && !inv) return false;
    }
  }
  return true;
}

bool Terms::Impl::EvidentlyNonNegative(TermId t) const {
  return terms[t].monos.empty() || EvidentlyPositive(t);
}

// exp(c log p + r) = p^c exp(r): exact over the reals where p > 0, and where p = 0
// and c > 0 (exp(-inf) = 0). Summands with other coefficients stay inside.
TermId Terms::Impl::Exp(TermId x) {
  constexpr int kMaxPower = 64;
  std::vector<std::pair<TermId, int>> powers;
  MonoMap rest;
  const TermNode& node = terms[x];
  for (size_t i = 0; i < node.monos.size(); ++i) {
    const std::vector<Factor>& factors = monos[node.monos[i]].factors;
    const BigRational& c = node.coeffs[i];
    if (factors.size() == 1 && factors[0].exponent == 1 &&
        boost::multiprecision::denominator(c) == 1 && abs(c) <= kMaxPower) {
      const Atom& atom = atoms[factors[0].atom];
      if (atom.kind == AtomKind::kFn && atom.name == "log" && atom.args.size() == 1) {
        const int power = static_cast<int>(boost::multiprecision::numerator(c));
        const TermId p = atom.args[0];
        if (power > 0 ? EvidentlyNonNegative(p) : EvidentlyPositive(p)) {
          powers.emplace_back(p, power);
          continue;
        }
      }
    }
    rest.emplace(node.monos[i], c);
  }
  if (powers.empty()) return AtomTerm(InternAtom(Atom{AtomKind::kFn, "exp", {x}}));
  const TermId r = FromMap(std::move(rest));
  TermId result = terms[r].monos.empty()
                      ? Constant(1)
                      : AtomTerm(InternAtom(Atom{AtomKind::kFn, "exp", {r}}));
  for (const auto& [p, power] : powers) {
    for (int k = 0; k < std::abs(power); ++k) {
      result = power > 0 ? Multiply(result, p) : Multiply(result, Inverse(p));
    }
  }
  return result;
}

std::optional<TermId> Terms::Impl::CancelInverse(TermId a, TermId s) {
  const TermNode& sn = terms[s];
  if (sn.monos.size() < 2 || !EvidentlyPositive(s)) return std::nullopt;
  const BigRational lead = sn.coeffs[0];
  const TermId normalised = Scale(s, BigRational(1) / lead);
  const AtomId inv = InternAtom(Atom{AtomKind::kInv, "", {normalised}});
  MonoMap out;
  const TermNode& an = terms[a];
  if (an.monos.empty()) return std::nullopt;
  for (size_t i = 0; i < an.monos.size(); ++i) {
    std::vector<Factor> factors = monos[an.monos[i]].factors;
    auto it = std::find_if(factors.begin(), factors.end(),
                           [&](const Factor& f) { return f.atom == inv; });
    if (it == factors.end()) return std::nullopt;
    if (--it->exponent == 0) factors.erase(it);
    out.emplace(InternMono(std::move(factors)), BigRational(terms[a].coeffs[i] * lead));
  }
  return FromMap(std::move(out));
}

// ---------------------------------------------------------------- public API

Terms::Terms() : impl_(std::make_unique<Impl>()) {}
Terms::~Terms() = default;

TermId Terms::Zero() { return 0; }
TermId Terms::One() { return 1; }
TermId Terms::Int(int64_t value) { return impl_->Constant(BigRational(value)); }

TermId Terms::Rational(int64_t num, int64_t den) {
  if (den == 0) return impl_->Inverse(Zero());  // a/0 is left uninterpreted
  return impl_->Constant(BigRational(cpp_int(num)) / BigRational(cpp_int(den)));
}

TermId Terms::Double(double value) {
  if (!std::isfinite(value)) {
    // Not a real number: an opaque constant that Evaluate maps back.
    const char* name = std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
    return Fn(name, {});
  }
  if (value == 0) return Zero();
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);  // value = mantissa * 2^exponent
  // 53 bits of mantissa as an exact integer.
  const int64_t digits = static_cast<int64_t>(std::ldexp(mantissa, 53));
  exponent -= 53;
  BigRational result{cpp_int(digits)};
  if (exponent >= 0) {
    result *= BigRational(cpp_int(1) << exponent);
  } else {
    result /= BigRational(cpp_int(1) << -exponent);
  }
  return impl_->Constant(result);
}

TermId Terms::Var(absl::string_view name) {
  return impl_->AtomTerm(impl_->InternAtom(Atom{AtomKind::kVar, std::string(name), {}}));
}

TermId Terms::Add(TermId a, TermId b) {
  const TermId pair[2] = {a, b};
  return Sum(pair);
}

TermId Terms::Sum(absl::Span<const TermId> terms) {
  if (terms.empty()) return Zero();
  if (terms.size() == 1) return terms[0];
  size_t total = 0;
  for (TermId t : terms) total += impl_->terms[t].monos.size();
  MonoMap map;
  map.reserve(total);
  for (TermId t : terms) {
    const TermNode& node = impl_->terms[t];
    for (size_t i = 0; i < node.monos.size(); ++i) {
      auto [it, inserted] = map.try_emplace(node.monos[i], node.coeffs[i]);
      if (!inserted) it->second += node.coeffs[i];
    }
  }
  return impl_->FromMap(std::move(map));
}

TermId Terms::Sub(TermId a, TermId b) { return Add(a, Neg(b)); }
TermId Terms::Neg(TermId a) { return impl_->Scale(a, BigRational(-1)); }
// x * (1/x) = 1 for the evidently positive sums a softmax divides by (smt/term.h).
TermId Terms::Mul(TermId a, TermId b) {
  if (std::optional<TermId> c = impl_->CancelInverse(a, b)) return *c;
  if (std::optional<TermId> c = impl_->CancelInverse(b, a)) return *c;
  return impl_->Multiply(a, b);
}

TermId Terms::Product(absl::Span<const TermId> terms) {
  TermId result = One();
  for (TermId t : terms) result = impl_->Multiply(result, t);
  return result;
}

TermId Terms::Div(TermId a, TermId b) { return Mul(a, Inv(b)); }
TermId Terms::Inv(TermId a) { return impl_->Inverse(a); }

TermId Terms::PowInt(TermId a, int exponent) {
  if (exponent == 0) return One();
  if (exponent < 0) {
    // Negate in 64 bits: -INT_MIN does not fit an int.
    const int64_t positive = -static_cast<int64_t>(exponent);
    if (positive > std::numeric_limits<int>::max()) {
      return Inv(Mul(PowInt(a, std::numeric_limits<int>::max()), a));
    }
    return Inv(PowInt(a, static_cast<int>(positive)));
  }
  const TermNode& node = impl_->terms[a];
  if (node.monos.size() == 1) {
    // A monomial: multiply the exponents, raise the coefficient.
    BigRational coeff = PowRational(node.coeffs[0], exponent);
    std::vector<Factor> factors = impl_->monos[node.monos[0]].factors;
    for (Factor& f : factors) f.exponent *= exponent;
    const MonoId mono = impl_->InternMono(std::move(factors));
    return impl_->InternTerm({{mono, std::move(coeff)}});
  }
  TermId result = One();
  TermId base = a;
  int remaining = exponent;
  while (remaining > 0) {
    if (remaining & 1) result = Mul(result, base);
    remaining >>= 1;
    if (remaining > 0) base = Mul(base, base);
  }
  return result;
}

TermId Terms::Fn(absl::string_view name, absl::Span<const TermId> args) {
  if (name == "exp" && args.size() == 1 && !impl_->functions.contains("exp")) {
    return impl_->Exp(args[0]);
  }
  return impl_->AtomTerm(impl_->InternAtom(
      Atom{AtomKind::kFn, std::string(name), std::vector<TermId>(args.begin(), args.end())}));
}

TermId Terms::Max(absl::Span<const TermId> terms) {
  std::vector<TermId> args;
  args.reserve(terms.size());
  std::optional<BigRational> best_constant;
  auto add = [&](TermId t) {
    if (impl_->IsConstant(t)) {
      BigRational value = impl_->ConstantOf(t);
      if (!best_constant || value > *best_constant) best_constant = std::move(value);
    } else {
      args.push_back(t);
    }
  };
  for (TermId t : terms) {
    const std::optional<AtomId> atom = impl_->AsAtom(t);
    if (atom && impl_->atoms[*atom].kind == AtomKind::kMax) {
      const std::vector<TermId> inner = impl_->atoms[*atom].args;
      for (TermId u : inner) add(u);
    } else {
      add(t);
    }
  }
  if (best_constant) args.push_back(impl_->Constant(*best_constant));
  std::sort(args.begin(), args.end());
  args.erase(std::unique(args.begin(), args.end()), args.end());
  if (args.empty()) return Zero();
  if (args.size() == 1) return args[0];
  return impl_->AtomTerm(impl_->InternAtom(Atom{AtomKind::kMax, "", std::move(args)}));
}

TermId Terms::Indicator(TermId a, TermId b) {
  if (a == b) return One();
  // Sides that differ by a non-zero constant are never equal.
  if (impl_->IsConstant(Sub(a, b))) return Zero();
  if (b < a) std::swap(a, b);
  return impl_->AtomTerm(impl_->InternAtom(Atom{AtomKind::kIndicator, "", {a, b}}));
}

int64_t Terms::size() const { return static_cast<int64_t>(impl_->terms.size()); }

}  // namespace loom::smt
