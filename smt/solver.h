#ifndef LOOM_SMT_SOLVER_H_
#define LOOM_SMT_SOLVER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::smt {

// Outcome of a validity query. kUnknown covers timeouts, resource limits and
// solver errors: it is never turned into kValid.
enum class Verdict { kValid, kInvalid, kUnknown };

absl::string_view VerdictName(Verdict verdict);

struct SolverOptions {
  unsigned timeout_ms = 10000;
};

struct ValidityResult {
  Verdict verdict = Verdict::kUnknown;
  // For kInvalid: a counterexample model; for kUnknown: the solver's reason.
  std::string detail;
};

// Decides whether the conjunction of the `(assert ...)` formulas in an SMT-LIB2
// script is valid (true for every assignment of its declared constants). The
// script's syntax errors are InvalidArgument; everything the solver cannot settle
// is kUnknown.
absl::StatusOr<ValidityResult> CheckValidity(absl::string_view smtlib2,
                                             const SolverOptions& options = {});

// "4.8.12" etc.
std::string Z3Version();

}  // namespace loom::smt

#endif  // LOOM_SMT_SOLVER_H_
