#ifndef LOOM_SMT_PROVE_H_
#define LOOM_SMT_PROVE_H_

// Proves equalities between terms: first by their canonical forms (smt/term.h),
// then with Z3 over the reals for what the normal form leaves open.

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "smt/solver.h"
#include "smt/term.h"

namespace loom::smt {

struct Goal {
  TermId lhs = 0;
  TermId rhs = 0;
};

struct ProofResult {
  // kValid: every goal holds for every assignment. kInvalid: a counterexample was
  // found and confirmed numerically with the real functions. kUnknown: anything
  // else (timeout, a model that holds only for uninterpreted functions, ...).
  Verdict verdict = Verdict::kUnknown;
  int failed_goal = -1;  // first goal not proved (kInvalid / kUnknown)
  // kInvalid: values of the variables that break `failed_goal`.
  absl::flat_hash_map<std::string, double> counterexample;
  double lhs_value = 0;  // kInvalid: both sides under the counterexample
  double rhs_value = 0;
  std::string detail;    // kUnknown: why
  int solver_calls = 0;  // goals that needed Z3
};

// Proves lhs == rhs for every goal. Goals whose sides have the same TermId hold
// without a solver call. The others are sent to Z3 together (one context per
// call, so calls on different threads are independent): uninterpreted functions
// become Z3 functions, inverses divisions, maxima and indicators if-then-else
// terms; the ranges of the built-in total functions (exp > 0, sigmoid in (0, 1),
// tanh and erf in (-1, 1)) are asserted unless the user redefined them. A model
// of a failing goal is checked with Terms::Evaluate before it is reported as a
// counterexample. Never throws.
ProofResult ProveEqual(const Terms& terms, absl::Span<const Goal> goals,
                       const SolverOptions& options = {});

}  // namespace loom::smt

#endif  // LOOM_SMT_PROVE_H_
