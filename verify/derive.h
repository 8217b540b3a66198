#ifndef LOOM_VERIFY_DERIVE_H_
#define LOOM_VERIFY_DERIVE_H_

// Lineage derivation: what each plan value holds, derived from what produced it.
//
// A plan value claims to hold a piece of a logical tensor (ir::SubTensor). The
// derivation never trusts a claim: it starts from the plan's inputs (parameter,
// optimizer-state and data shards, whose claims define what the loader puts
// there) and walks the plan in data-flow order. For every task and collective it
// computes what the outputs hold from what the inputs hold and the item's
// semantics, and compares that with the outputs' claims. What a value holds is a
// *contribution* to its logical tensor over its box:
//   full      the box of the tensor itself;
//   zero      zeros (a share that contributes nothing);
//   reduced   a chunk of a reduction: op o computed over part of a reduction index
//             space (a split contracted dim), plus the op's additive inputs (a
//             bias) where this piece includes them; chunks of one reduction that
//             tile its index space sum (or max) to the full value;
//   linear    op o applied to partial inputs at positions where o is linear
//             (add, accumulate, scale, a matmul operand, ...): pieces whose
//             inputs at each position sum to the full input sum to o's output.
// Sums (all-reduce, reduce-scatter, local accumulation) are exact set arithmetic
// on chunks: a gap is a missing piece, an overlap a doubled piece, chunks of two
// different reductions a wrong group. Each compute task must be a correct piece
// of its logical op: same kind, operands in order, boxes consistent with the op's
// partition signature, attributes equal to the op's piece attributes; that the op
// kind's pieces compose is a law proved separately per kind and split pattern
// (verify/laws.h), collected here as LawUse records. Every failure carries a
// one-line counterexample with concrete values.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/findings.h"

namespace loom::verify {

struct Derivation {
  std::vector<Failure> failures;    // in data-flow order
  std::vector<Undecided> undecided;
  std::vector<LawUse> laws;         // distinct by key
  int64_t items = 0;                // tasks and collectives derived
  int64_t values = 0;
  // Layer stages (verify/stages.h): cut from the rest, classes of alike ones, and
  // stages whose derivation is an alike stage's (derived once, on its own).
  int64_t stages = 0;
  int64_t distinct_stages = 0;
  int64_t stages_reused = 0;
  // Where the time went, in seconds: checking the plan, folding alike layers,
  // slicing, deriving the stage classes, the walk of the rest; and whether the
  // plain derivation had to take over from the fast one.
  struct Times {
    double validate = 0, fold = 0, slice = 0, classes = 0, walk = 0;
  } times;
  bool plain = false;
};

// Two ways to derive a plan. The plain one walks every item (a factored plan's
// slice, verify/factored.h), cutting only at complete values. The fast one reads
// values that cross layers as opaque shares where their groups qualify
// (verify/stages.h) and, for a factored plan, folds alike layers of the unit
// before slicing (verify/fold.h), so its cost hardly grows with layers,
// micro-batches or replicas. Neither trusts what the other found: when the fast
// one finds anything (a failure, an undecided entry) or gives up, the plain one
// derives the plan again and its findings are the answer, reported at their
// places as the plain walk meets them.
struct DeriveOptions {
  bool fast = true;
  bool plain = true;  // the fallback; without it, the fast findings are returned
  // Called with each law the first time a derivation relies on it (before the
  // derivation ends, so that proofs can start early); the laws of the result
  // are Derivation::laws all the same.
  std::function<void(const LawUse&)> on_law;
  // Threads the derivation may use (0: every core): the plan checks run alongside
  // the folding of a factored plan's alike layers.
  int threads = 0;
};

// Derives every value of a plan and checks coverage of the spec's outputs: the
// values listed in plan.outputs must hold, for every output tensor of `spec`,
// boxes that tile it exactly with full values. Errors only for plans ValidatePlan
// rejects; everything about lineage is a Failure or an Undecided.
absl::StatusOr<Derivation> DeriveLineage(const ir::Graph& spec, const ir::Plan& plan,
                                         const DeriveOptions& options = {});

}  // namespace loom::verify

#endif  // LOOM_VERIFY_DERIVE_H_
