#ifndef LOOM_VERIFY_LAW_REDUCE_H_
#define LOOM_VERIFY_LAW_REDUCE_H_

// Shape reduction of partition laws.
//
// A law (verify/laws.h) is stated at the op's real shapes, which at production
// sizes are far too large to build symbolically. Its truth depends only on the
// pattern of the split, not on the sizes, for the op kinds listed below, so it
// is proved at reduced sizes chosen per signature label:
//   - a split label keeps its shard pattern: with g the greatest common divisor
//     of the piece's bounds and the extent, the label becomes extent / g units,
//     each 1 element wide for a spatial label and 2 for a reduction label (so a
//     chunk sums more than one term);
//   - a whole label becomes 1 element when spatial, min(extent, 2) when it is
//     reduced, maximised or fixed (normalised, softmax, rotated axes);
//   - labels that must split alike (grouped-query heads) shrink by a common
//     factor, which keeps their ratio;
//   - op-specific floors: top-k keeps at least k + 1 experts;
//   - sizes that attributes carry follow their labels (verify/law_resize.h):
//     positions along a label (slice, pad, split) keep their pattern in units,
//     output dims an attribute sizes (fill, expand, the vocabulary of pick_grad
//     and embedding_grad, a reshape's non-leading output dims) become
//     min(size, 2), and a reshape's leading dims keep every group's products
//     equal and integral.
// docs/verification.md gives the argument; tests/verify/law_reduce_test.cc
// checks it on every law of the strategy matrix, correct and mutated, against a
// numeric comparison at two larger sizes.
//
// The MoE routing ops (capacity and group sizes decide which tokens are
// dropped) and logical ops with a nonzero vocabulary offset are not reduced:
// their laws are proved at their real sizes, below verify/laws.h's bound.

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "verify/findings.h"

namespace loom::verify {

// Whether laws of this op kind are proved at reduced sizes.
bool ReducibleKind(ir::OpKind kind);

// Labels whose extent an attribute fixes (top-k's k) or that must stay 1 (a
// reshape's size-1 dims, expand's input dim): they keep their size.
std::set<std::string> SizeFixedLabels(const LawUse& law);

// The reduced label extents the rules above choose.
absl::StatusOr<std::map<std::string, int64_t>> ReducedExtents(const LawUse& law);

// A spatial label split into many pieces (the batch split over 64 data-parallel
// replicas) is cropped to the law's piece and one neighbouring piece on each
// side, for op kinds without piece attributes (the law itself for the others): a spatial label's positions are
// computed independently, and without attributes a piece cannot tell where it
// is, so the first, an inner and the last piece are the only cases. Errors when
// the cropped op labels its dims differently.
absl::StatusOr<LawUse> CropSpatialLabels(const LawUse& law);

// The law at its reduced sizes (cropped as above where it applies); the law
// itself when its kind is not reducible or the reduced instance does not build
// (then it is proved at its real sizes).
LawUse ReduceLaw(const LawUse& law);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_LAW_REDUCE_H_
