#ifndef LOOM_VERIFY_LAWS_H_
#define LOOM_VERIFY_LAWS_H_

// Partition laws: an op kind's pieces, as a plan uses them, compose to the op.
//
// For a LawUse (op kind, the logical op's attributes and input types, the piece's
// interval per signature label, its partial operands) the law is proved with the
// symbolic kernels (verify/sym_ops.h) over the reals:
//  - spatial pieces: the piece, run on its input boxes with the piece attributes
//    the op's schema gives, equals the op's output over its box;
//  - split reductions: the pieces of every sibling chunk of the reduction (the
//    additive inputs in the first chunk only) sum, or max, to the op's output;
//  - partial operands: the op is additive in them: op(y + z) = op(y) + op(z) on the
//    piece, for fresh y and z.
// Equal canonical terms prove a goal at once; the rest goes to Z3.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "ir/op_schema.h"
#include "smt/solver.h"
#include "verify/findings.h"

namespace loom::verify {

struct LawProof {
  smt::Verdict verdict = smt::Verdict::kUnknown;
  std::string detail;  // why not proved; a counterexample when refuted
  int solver_calls = 0;
};

// Terms built for one law are bounded: a law whose inputs and outputs hold more
// elements (LawElements) is undecided and never built. Verify proves laws at
// reduced sizes (verify/law_reduce.h), far below the bound; a law that cannot be
// reduced and is larger stays undecided instead of exhausting memory.
inline constexpr int64_t kMaxLawElements = 1 << 15;

// The elements of the law's instance: the op's inputs and outputs. Errors when
// its output types do not build.
absl::StatusOr<int64_t> LawElements(const LawUse& law);

LawProof ProveLaw(const LawUse& law, unsigned timeout_ms);

// Numeric check of the law: every input element a random constant (seeded),
// both sides of every goal evaluated; the largest relative difference (0 when the
// pieces compose). Errors when the instance does not build.
absl::StatusOr<double> LawNumericGap(const LawUse& law, uint64_t seed);

// The attributes the op's schema gives the law's piece (the op's own when its
// kind has no piece attributes), with label k's interval replaced by `moved`.
// Errors when the piece does not build there.
absl::StatusOr<ir::AttrMap> PieceAttrsAt(const LawUse& law, size_t k, ir::Interval moved);
// The same given the law's signature and output types (for callers that ask at
// many positions).
absl::StatusOr<ir::AttrMap> PieceAttrsAt(const LawUse& law, const ir::DimSignature& sig,
                                         const std::vector<ir::TensorType>& out_types, size_t k,
                                         ir::Interval moved);

// The law's cache key: its LawUse key and the symbolic semantics version of its kind.
std::string LawCacheKey(const LawUse& law);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_LAWS_H_
