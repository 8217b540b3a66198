#include "smt/solver.h"

#include <z3++.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::smt {

absl::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kValid:
      return "valid";
    case Verdict::kInvalid:
      return "invalid";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

absl::StatusOr<ValidityResult> CheckValidity(absl::string_view smtlib2,
                                             const SolverOptions& options) {
  z3::context ctx;
  z3::expr_vector assertions(ctx);
  try {
    assertions = ctx.parse_string(std::string(smtlib2).c_str());
  } catch (const z3::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("SMT-LIB2 script: ", e.msg()));
  }
  ValidityResult result;
  try {
    z3::solver solver(ctx);
    z3::params params(ctx);
    params.set("timeout", options.timeout_ms);
    solver.set(params);
    // Valid iff the negation of the conjunction is unsatisfiable.
    solver.add(!z3::mk_and(assertions));
    switch (solver.check()) {
      case z3::unsat:
        result.verdict = Verdict::kValid;
        break;
      case z3::sat:
        result.verdict = Verdict::kInvalid;
        result.detail = solver.get_model().to_string();
        break;
      case z3::unknown:
        result.verdict = Verdict::kUnknown;
        result.detail = solver.reason_unknown();
        break;
    }
  } catch (const z3::exception& e) {
    result.verdict = Verdict::kUnknown;
    result.detail = e.msg();
  }
  return result;
}

std::string Z3Version() {
  unsigned major = 0, minor = 0, build = 0, revision = 0;
  Z3_get_version(&major, &minor, &build, &revision);
  return absl::StrCat(major, ".", minor, ".", build);
}

}  // namespace loom::smt
