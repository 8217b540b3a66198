// Inspection, printing and numeric evaluation of terms (smt/term.h).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "smt/term.h"
#include "smt/term_impl.h"

namespace loom::smt {
namespace {

std::string RationalString(const BigRational& value) { return value.str(); }

class Printer {
 public:
  explicit Printer(const Terms::Impl& impl) : impl_(impl) {}

  std::string Term(TermId t) const {
    const TermNode& node = impl_.terms[t];
    if (node.monos.empty()) return "0";
    std::string out;
    for (size_t i = 0; i < node.monos.size(); ++i) {
      BigRational coeff = node.coeffs[i];
      if (i > 0) {
        if (coeff < 0) {
          absl::StrAppend(&out, " - ");
          coeff = -coeff;
        } else {
          absl::StrAppend(&out, " + ");
        }
      }
      absl::StrAppend(&out, Monomial(node.monos[i], coeff));
    }
    return out;
  }

 private:
  std::string Monomial(MonoId mono, const BigRational& coeff) const {
    const std::vector<Factor>& factors = impl_.monos[mono].factors;
    std::string coeff_text = RationalString(coeff);
    if (factors.empty()) return coeff_text;
    std::vector<std::string> parts;
    for (const Factor& f : factors) {
      std::string atom = Atom(f.atom);
      if (f.exponent != 1) absl::StrAppend(&atom, "^", f.exponent);
      parts.push_back(std::move(atom));
    }
    const std::string product = absl::StrJoin(parts, "*");
    if (coeff == 1) return product;
    if (coeff == -1) return absl::StrCat("-", product);
    if (boost::multiprecision::denominator(coeff) != 1) {
      coeff_text = absl::StrCat("(", coeff_text, ")");
    }
    return absl::StrCat(coeff_text, "*", product);
  }

  std::string Args(const std::vector<TermId>& args, absl::string_view sep) const {
    std::vector<std::string> parts;
    parts.reserve(args.size());
    for (TermId a : args) parts.push_back(Term(a));
    return absl::StrJoin(parts, sep);
  }

  std::string Atom(AtomId id) const {
    const loom::smt::Atom& atom = impl_.atoms[id];
    switch (atom.kind) {
      case AtomKind::kVar:
        return atom.name;
      case AtomKind::kFn:
        return absl::StrCat(atom.name, "(", Args(atom.args, ", "), ")");
      case AtomKind::kInv:
        return absl::StrCat("inv(", Term(atom.args[0]), ")");
      case AtomKind::kMax:
        return absl::StrCat("max(", Args(atom.args, ", "), ")");
      case AtomKind::kIndicator:
        return absl::StrCat("[", Args(atom.args, " == "), "]");
    }
    return "?";
  }

  const Terms::Impl& impl_;
};

absl::StatusOr<double> Builtin(absl::string_view name, absl::Span<const double> args) {
  if (args.empty()) {
    if (name == "inf") return std::numeric_limits<double>::infinity();
    if (name == "-inf") return -std::numeric_limits<double>::infinity();
    if (name == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  if (args.size() == 1) {
    const double x = args[0];
    if (name == "exp") return std::exp(x);
    if (name == "log") return std::log(x);
    if (name == "sqrt") return std::sqrt(x);
    if (name == "rsqrt") return 1.0 / std::sqrt(x);
    if (name == "tanh") return std::tanh(x);
    if (name == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "erf") return std::erf(x);
    double exponent = 0;
    if (absl::StartsWith(name, "pow_") && absl::SimpleAtod(name.substr(4), &exponent)) {
      return std::pow(x, exponent);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no numeric meaning for function '", name, "' of arity ", args.size()));
}

class Evaluator {
 public:
  Evaluator(const Terms::Impl& impl, const absl::flat_hash_map<std::string, double>& vars)
      : impl_(impl), vars_(vars) {}

  absl::StatusOr<double> Term(TermId t) {
    auto cached = term_values_.find(t);
    if (cached != term_values_.end()) return cached->second;
    const TermNode& node = impl_.terms[t];
    double total = 0;
    for (size_t i = 0; i < node.monos.size(); ++i) {
      double product = node.coeff_values[i];
      for (const Factor& f : impl_.monos[node.monos[i]].factors) {
        absl::StatusOr<double> value = Atom(f.atom);
        if (!value.ok()) return value.status();
        product *= f.exponent == 1 ? *value : std::pow(*value, f.exponent);
      }
      total += product;
    }
    term_values_[t] = total;
    return total;
  }

 private:
  absl::StatusOr<double> Atom(AtomId id) {
    auto cached = atom_values_.find(id);
    if (cached != atom_values_.end()) return cached->second;
    absl::StatusOr<double> value = ComputeAtom(impl_.atoms[id]);
    if (value.ok()) atom_values_[id] = *value;
    return value;
  }

  absl::StatusOr<double> ComputeAtom(const loom::smt::Atom& atom) {
    if (atom.kind == AtomKind::kVar) {
      auto it = vars_.find(atom.name);
      if (it == vars_.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unbound variable '", atom.name, "'"));
      }
      return it->second;
    }
    std::vector<double> args;
    args.reserve(atom.args.size());
    for (TermId a : atom.args) {
      absl::StatusOr<double> value = Term(a);
      if (!value.ok()) return value.status();
      args.push_back(*value);
    }
    switch (atom.kind) {
      case AtomKind::kVar:
        break;
      case AtomKind::kFn: {
        auto user = impl_.functions.find(atom.name);
        if (user != impl_.functions.end()) return user->second(args);
        return Builtin(atom.name, args);
      }
      case AtomKind::kInv:
        return 1.0 / args[0];
      case AtomKind::kMax: {
        double best = -std::numeric_limits<double>::infinity();
        for (double v : args) best = std::max(best, v);
        return best;
      }
      case AtomKind::kIndicator:
        return args[0] == args[1] ? 1.0 : 0.0;
    }
    return absl::InternalError("unknown atom kind");
  }

  const Terms::Impl& impl_;
  const absl::flat_hash_map<std::string, double>& vars_;
  absl::flat_hash_map<TermId, double> term_values_;
  absl::flat_hash_map<AtomId, double> atom_values_;
};

}  // namespace

bool Terms::IsConstant(TermId t) const { return impl_->IsConstant(t); }

absl::StatusOr<double> Terms::ConstantValue(TermId t) const {
  if (t < 0 || t >= size()) return absl::InvalidArgumentError(absl::StrCat("no term ", t));
  if (!impl_->IsConstant(t)) {
    return absl::InvalidArgumentError(absl::StrCat("not a constant: ", ToString(t)));
  }
  return RationalToDouble(impl_->ConstantOf(t));
}

std::vector<std::string> Terms::Variables(TermId t) const {
  absl::flat_hash_set<TermId> seen_terms;
  absl::flat_hash_set<AtomId> seen_atoms;
  std::vector<std::string> names;
  std::vector<TermId> stack = {t};
  while (!stack.empty()) {
    const TermId current = stack.back();
    stack.pop_back();
    if (!seen_terms.insert(current).second) continue;
    for (MonoId mono : impl_->terms[current].monos) {
      for (const Factor& f : impl_->monos[mono].factors) {
        if (!seen_atoms.insert(f.atom).second) continue;
        const Atom& atom = impl_->atoms[f.atom];
        if (atom.kind == AtomKind::kVar) names.push_back(atom.name);
        stack.insert(stack.end(), atom.args.begin(), atom.args.end());
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Terms::ToString(TermId t) const { return Printer(*impl_).Term(t); }

void Terms::DefineFunction(absl::string_view name, NumericFn fn) {
  impl_->functions[std::string(name)] = fn;
}

absl::StatusOr<double> Terms::Evaluate(
    TermId t, const absl::flat_hash_map<std::string, double>& vars) const {
  if (t < 0 || t >= size()) return absl::InvalidArgumentError(absl::StrCat("no term ", t));
  return Evaluator(*impl_, vars).Term(t);
}

}  // namespace loom::smt
