#ifndef LOOM_TRANSFORM_BALANCED_CHUNKS_H_
#define LOOM_TRANSFORM_BALANCED_CHUNKS_H_

// Megatron-LM's load-balanced context parallelism: the sequence in 2 * cp chunks,
// context-parallel rank r holding chunks r and 2 * cp - 1 - r, so that under a
// causal mask every rank attends over the same number of key-query pairs.
//
// A value's claim is one box, so a rank's two chunks are two values. The plan is
// made for 2 * cp virtual context-parallel ranks (every chunk on a rank of its
// own) and then folded: virtual ranks v and 2 * cp - 1 - v become physical rank
// min(v, 2 * cp - 1 - v). A collective over a context-parallel group, whose
// members now meet in pairs on one device, is rewritten over the physical ranks:
//  - all-gather: one gather of the first half of the chunks (ranks 0 .. cp - 1),
//    one of the second half (the same ranks in reverse order: rank cp - 1 holds
//    chunk cp), and a local concat of the two halves, which both virtual members
//    of a device then read;
//  - reduce-scatter: the rank's two partial sums accumulated locally, sliced into
//    the halves, and each half reduce-scattered as above;
//  - all-reduce: the two partial sums accumulated locally, then one all-reduce;
//  - a transfer between the two virtual members of one device: none, the
//    receiver reads the sender's value.
// Work the two virtual ranks of a device both did on the same values (the
// parameters they both hold, their casts, an update of a replicated parameter)
// is done once: equal plan inputs on a device become one value, and a task or
// collective that repeats another on the same inputs is dropped, its readers
// reading the other's outputs.

#include "absl/status/statusor.h"
#include "ir/plan.h"

namespace loom::transform {

// Folds `plan`, made on a mesh whose "cp" axis has 2 * cp virtual ranks, onto the
// same mesh with cp ranks. The plan must be unordered (folding comes before any
// schedule).
absl::StatusOr<ir::Plan> FoldBalancedChunks(ir::Plan plan, int cp);

}  // namespace loom::transform

#endif  // LOOM_TRANSFORM_BALANCED_CHUNKS_H_
