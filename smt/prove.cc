// Equality proofs: canonical forms first, then Z3 over the reals (smt/prove.h).

#include "smt/prove.h"

#include <z3++.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "smt/term_impl.h"

namespace loom::smt {
namespace {

using boost::multiprecision::cpp_int;

// Translates normal forms into Z3 real expressions, sharing sub-terms.
class Translator {
 public:
  Translator(z3::context& ctx, const Terms::Impl& impl) : ctx_(ctx), impl_(impl) {}

  z3::expr Term(TermId t) {
    auto cached = terms_.find(t);
    if (cached != terms_.end()) return cached->second;
    const TermNode& node = impl_.terms[t];
    z3::expr_vector summands(ctx_);
    for (size_t i = 0; i < node.monos.size(); ++i) {
      summands.push_back(Monomial(node.monos[i], node.coeffs[i]));
    }
    z3::expr result = summands.empty()     ? ctx_.real_val(0)
                      : summands.size() == 1 ? summands[0]
                                             : z3::sum(summands);
    terms_.emplace(t, result);
    return result;
  }

  // Facts that hold for the real meanings of the functions met so far.
  const z3::expr_vector& facts() const { return facts_; }

  // The real constants made for variables, by name.
  const absl::flat_hash_map<std::string, z3::expr>& variables() const { return variables_; }

 private:
  z3::expr Number(const BigRational& value) {
    return ctx_.real_val(value.str().c_str());
  }

  // coeff * (product of positive powers) / (product of negative powers).
  z3::expr Monomial(MonoId mono, const BigRational& coeff) {
    std::optional<z3::expr> numerator;
    std::optional<z3::expr> denominator;
    auto times = [](std::optional<z3::expr>& acc, const z3::expr& e) {
      acc = acc ? *acc * e : e;
    };
    for (const Factor& f : impl_.monos[mono].factors) {
      const z3::expr atom = Atom(f.atom);
      std::optional<z3::expr>& acc = f.exponent > 0 ? numerator : denominator;
      for (int32_t k = 0; k < std::abs(f.exponent); ++k) times(acc, atom);
    }
    z3::expr result = Number(coeff);
    if (numerator) result = coeff == 1 ? *numerator : result * *numerator;
    if (denominator) result = result / *denominator;
    return result;
  }

  z3::expr Atom(AtomId id) {
    auto cached = atoms_.find(id);
    if (cached != atoms_.end()) return cached->second;
    const loom::smt::Atom& atom = impl_.atoms[id];
    z3::expr result = ctx_.real_val(0);
    switch (atom.kind) {
      case AtomKind::kVar:
        result = ctx_.real_const(atom.name.c_str());
        variables_.emplace(atom.name, result);
        break;
      case AtomKind::kFn: {
        z3::expr_vector args(ctx_);
        z3::sort_vector domain(ctx_);
        for (TermId a : atom.args) {
          args.push_back(Term(a));
          domain.push_back(ctx_.real_sort());
        }
        // Named by name and arity, so variables and functions never clash.
        const std::string symbol = absl::StrCat(atom.name, "/", atom.args.size());
        z3::func_decl decl = ctx_.function(symbol.c_str(), domain, ctx_.real_sort());
        result = decl(args);
        AddRangeFacts(atom, result);
        break;
      }
      case AtomKind::kInv:
        result = ctx_.real_val(1) / Term(atom.args[0]);
        break;
      case AtomKind::kMax: {
        result = Term(atom.args[0]);
        for (size_t i = 1; i < atom.args.size(); ++i) {
          const z3::expr next = Term(atom.args[i]);
          result = z3::ite(next > result, next, result);
        }
        break;
      }
      case AtomKind::kIndicator:
        result = z3::ite(Term(atom.args[0]) == Term(atom.args[1]), ctx_.real_val(1),
                         ctx_.real_val(0));
        break;
    }
    atoms_.emplace(id, result);
    return result;
  }

  // Ranges of the total built-in functions (unless redefined by the user):
  // exp > 0, 0 < sigmoid < 1, -1 < tanh < 1, -1 < erf < 1.
  void AddRangeFacts(const loom::smt::Atom& atom, const z3::expr& app) {
    if (atom.args.size() != 1 || impl_.functions.contains(atom.name)) return;
    if (atom.name == "exp") {
      facts_.push_back(app > 0);
    } else if (atom.name == "sigmoid") {
      facts_.push_back(app > 0 && app < 1);
    } else if (atom.name == "tanh" || atom.name == "erf") {
      facts_.push_back(app > -1 && app < 1);
    }
  }

  z3::context& ctx_;
  const Terms::Impl& impl_;
  z3::expr_vector facts_{ctx_};
  absl::flat_hash_map<TermId, z3::expr> terms_;
  absl::flat_hash_map<AtomId, z3::expr> atoms_;
  absl::flat_hash_map<std::string, z3::expr> variables_;
};

// A model value as a double; nullopt when it is not a number.
std::optional<double> ModelValue(const z3::expr& value) {
  if (value.is_algebraic()) {
    std::string text = value.get_decimal_string(20);
    double result = 0;
    if (absl::SimpleAtod(absl::StripSuffix(text, "?"), &result)) return result;
    return std::nullopt;
  }
  if (!value.is_numeral()) return std::nullopt;
  // "n" or "n/d", exact.
  const std::string text = Z3_get_numeral_string(value.ctx(), value);
  const size_t slash = text.find('/');
  const cpp_int num(text.substr(0, slash));
  const cpp_int den(slash == std::string::npos ? std::string("1") : text.substr(slash + 1));
  if (den == 0) return std::nullopt;
  return RationalToDouble(BigRational(num) / BigRational(den));
}

bool SameValue(double lhs, double rhs) {
  const double scale = std::max({std::abs(lhs), std::abs(rhs), 1e-12});
  return std::abs(lhs - rhs) <= 1e-9 * scale;
}

// Judges a Z3 model of `lhs != rhs` with the real meanings of the functions.
void JudgeModel(const Terms& terms, const Goal& goal, const z3::model& model,
                const Translator& translator, ProofResult& result) {
  absl::flat_hash_map<std::string, double> values;
  std::vector<std::string> names = terms.Variables(goal.lhs);
  for (std::string& name : terms.Variables(goal.rhs)) names.push_back(std::move(name));
  for (const std::string& name : names) {
    double v = 0;  // variables the model leaves free
    auto it = translator.variables().find(name);
    if (it != translator.variables().end()) {
      std::optional<double> parsed = ModelValue(model.eval(it->second, true));
      if (!parsed) {
        result.verdict = Verdict::kUnknown;
        result.detail = absl::StrCat("model value of '", name, "' is not a number");
        return;
      }
      v = *parsed;
    }
    values[name] = v;
  }
  absl::StatusOr<double> lhs = terms.Evaluate(goal.lhs, values);
  absl::StatusOr<double> rhs = terms.Evaluate(goal.rhs, values);
  if (!lhs.ok() || !rhs.ok()) {
    result.verdict = Verdict::kUnknown;
    result.detail = absl::StrCat("counterexample could not be evaluated: ",
                                 (!lhs.ok() ? lhs.status() : rhs.status()).message());
    return;
  }
  result.lhs_value = *lhs;
  result.rhs_value = *rhs;
  if (!std::isfinite(*lhs) || !std::isfinite(*rhs)) {
    result.verdict = Verdict::kUnknown;
    result.detail = absl::StrFormat(
        "counterexample evaluates to a non-finite value (lhs %g, rhs %g)", *lhs, *rhs);
    return;
  }
  if (SameValue(*lhs, *rhs)) {
    result.verdict = Verdict::kUnknown;
    result.detail = "counterexample holds only for uninterpreted functions";
    return;
  }
  result.verdict = Verdict::kInvalid;
  result.counterexample = std::move(values);
}

// Checks one goal; true when it is proved, else fills `result`.
bool CheckGoal(const Terms& terms, const std::vector<Goal>& goals, int index,
               z3::solver& solver, Translator& translator, ProofResult& result) {
  const Goal& goal = goals[index];
  solver.push();
  solver.add(translator.Term(goal.lhs) != translator.Term(goal.rhs));
  const z3::check_result status = solver.check();
  bool proved = false;
  switch (status) {
    case z3::unsat:
      proved = true;
      break;
    case z3::sat:
      result.failed_goal = index;
      JudgeModel(terms, goal, solver.get_model(), translator, result);
      break;
    case z3::unknown:
      result.failed_goal = index;
      result.verdict = Verdict::kUnknown;
      result.detail = absl::StrCat("solver could not decide: ", solver.reason_unknown());
      break;
  }
  solver.pop();
  return proved;
}

void ProveWithSolver(const Terms& terms, absl::Span<const Goal> all_goals,
                     const std::vector<int>& open, const SolverOptions& options,
                     ProofResult& result) {
  z3::context ctx;
  z3::solver solver(ctx);
  z3::params params(ctx);
  params.set("timeout", options.timeout_ms);
  // Some nonlinear tactics overrun the timeout; the resource limit bounds them too.
  params.set("rlimit", static_cast<unsigned>(std::min<uint64_t>(
                           uint64_t{20000} * options.timeout_ms, uint64_t{4000000000})));
  solver.set(params);
  Translator translator(ctx, terms.impl());
  std::vector<Goal> goals(all_goals.begin(), all_goals.end());
  z3::expr_vector negated(ctx);
  for (int i : open) {
    negated.push_back(translator.Term(goals[i].lhs) != translator.Term(goals[i].rhs));
  }
  solver.add(translator.facts());

  if (open.size() > 1) {
    // All goals at once: one unsat answer proves them all.
    solver.push();
    solver.add(z3::mk_or(negated));
    const z3::check_result status = solver.check();
    solver.pop();
    if (status == z3::unsat) {
      result.verdict = Verdict::kValid;
      return;
    }
  }
  // One by one, in order, to find the first goal not proved.
  for (int i : open) {
    if (!CheckGoal(terms, goals, i, solver, translator, result)) return;
  }
  result.verdict = Verdict::kValid;
}

// Before the solver: the goals evaluated at two fixed pseudo-random points (all
// positive, then mixed signs). A goal whose sides differ well beyond rounding
// (1e-6 of the larger side, at least 1e-6) is refuted with that point as its
// counterexample; a proof still needs the solver.
bool RefuteNumerically(const Terms& terms, absl::Span<const Goal> goals,
                       const std::vector<int>& open, ProofResult& result) {
  std::vector<std::string> names;
  for (int i : open) {
    for (TermId side : {goals[i].lhs, goals[i].rhs}) {
      for (std::string& n : terms.Variables(side)) names.push_back(std::move(n));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (int pass = 0; pass < 2; ++pass) {
    absl::flat_hash_map<std::string, double> values;
    uint64_t state = 0x9e3779b97f4a7c15ull + pass;
    for (const std::string& name : names) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double u = static_cast<double>((state >> 11) % 1024) / 1024.0;  // [0, 1)
      values[name] = pass == 0 ? 0.25 + 1.75 * u : 4.0 * u - 2.0;
    }
    for (int i : open) {
      absl::StatusOr<double> lhs = terms.Evaluate(goals[i].lhs, values);
      absl::StatusOr<double> rhs = terms.Evaluate(goals[i].rhs, values);
      if (!lhs.ok() || !rhs.ok()) return false;  // a function without numeric meaning
      if (!std::isfinite(*lhs) || !std::isfinite(*rhs)) continue;
      const double scale = std::max({std::abs(*lhs), std::abs(*rhs), 1.0});
      if (std::abs(*lhs - *rhs) <= 1e-6 * scale) continue;
      result.verdict = Verdict::kInvalid;
      result.failed_goal = i;
      result.lhs_value = *lhs;
      result.rhs_value = *rhs;
      // Only the variables of the failing goal.
      for (TermId side : {goals[i].lhs, goals[i].rhs}) {
        for (const std::string& n : terms.Variables(side)) result.counterexample[n] = values[n];
      }
      return true;
    }
  }
  return false;
}

ProofResult Undecided(const std::vector<int>& open, std::string detail) {
  ProofResult result;
  result.verdict = Verdict::kUnknown;
  result.failed_goal = open.front();
  result.detail = std::move(detail);
  result.solver_calls = static_cast<int>(open.size());
  return result;
}

}  // namespace

ProofResult ProveEqual(const Terms& terms, absl::Span<const Goal> goals,
                       const SolverOptions& options) {
  ProofResult result;
  std::vector<int> open;
  for (int i = 0; i < static_cast<int>(goals.size()); ++i) {
    for (TermId side : {goals[i].lhs, goals[i].rhs}) {
      if (side < 0 || side >= terms.size()) {
        result.failed_goal = i;
        result.detail = absl::StrCat("goal ", i, ": no term ", side);
        return result;
      }
    }
    if (goals[i].lhs != goals[i].rhs) open.push_back(i);
  }
  if (open.empty()) {
    result.verdict = Verdict::kValid;
    return result;
  }
  if (RefuteNumerically(terms, goals, open, result)) return result;
  result.solver_calls = static_cast<int>(open.size());
  try {
    ProveWithSolver(terms, goals, open, options, result);
  } catch (const z3::exception& e) {
    result = Undecided(open, absl::StrCat("solver error: ", e.msg()));
  } catch (const std::exception& e) {
    result = Undecided(open, absl::StrCat("error while proving: ", e.what()));
  }
  return result;
}

}  // namespace loom::smt
