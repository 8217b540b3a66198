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
//   - the MoE routing ops (tokens in groups with a per-group capacity) keep
//     whole groups, their tokens, k, experts and capacity: the token and slot
//     labels shrink to the piece's pattern in groups, and `groups` follows.
// docs/verification.md gives the argument; tests/verify/law_reduce_test.cc
// checks it on every law of the strategy matrix, correct and mutated, against a
// numeric comparison at two larger sizes.
//
// Op kinds whose attributes carry sizes, or whose results depend on positions
// through them (reshape, fill, expand, slice, pad, split, concat, the
// scatter-style pick_grad, which takes a vocabulary size), are not reduced:
// their laws are proved at their real sizes. embedding_grad is reduced over its
// positions and d; its vocabulary rows keep the size its attribute gives.

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "verify/derive.h"

namespace loom::verify {

// Whether laws of this op kind are proved at reduced sizes.
bool ReducibleKind(ir::OpKind kind);

// The law with label `extents` in place of its own (every label of the law must
// be listed; intervals, input shapes and size attributes are rescaled with it)
// and its key recomputed. Errors when a bound or a dim does not scale exactly or
// the op does not build at the new sizes.
absl::StatusOr<LawUse> ResizeLaw(const LawUse& law, const std::map<std::string, int64_t>& extents);

// Labels whose extent an attribute fixes (top-k's k): they keep their size.
std::set<std::string> SizeFixedLabels(const LawUse& law);

// The reduced label extents the rules above choose.
absl::StatusOr<std::map<std::string, int64_t>> ReducedExtents(const LawUse& law);

// The law at its reduced sizes; the law itself when its kind is not reducible or
// the reduced instance does not build (then it is proved at its real sizes).
LawUse ReduceLaw(const LawUse& law);

// The canonical key of a law (kind, attributes, input types, label pattern,
// partial operands): equal keys are the same law.
std::string LawKey(const LawUse& law);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_LAW_REDUCE_H_
