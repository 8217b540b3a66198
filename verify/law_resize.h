#ifndef LOOM_VERIFY_LAW_RESIZE_H_
#define LOOM_VERIFY_LAW_RESIZE_H_

// Size-carrying attributes under shape reduction (verify/law_reduce.h).
//
// A law's labels are those of the op's inputs; most op kinds carry no sizes in
// their attributes, so the law at new label extents is the same op on rescaled
// input shapes. Some carry sizes, which ResizeLaw rewrites as their schemas say
// (ir/op_schema.h):
//   - free output labels, those only an output carries and an attribute sizes
//     (fill's dims, expand's expanded dim, the vocabulary of pick_grad and
//     embedding_grad, a reshape's non-leading output dims), take the size the
//     extents list for them, else keep theirs; the schema's resize rule
//     (OpSchema::resize_attrs) writes `shape`, `size` or `vocab`;
//   - a reshape's leading output dim of each group is solved from the group's
//     input product (ir/ops/reshape.h), so every group keeps equal products on
//     both sides;
//   - attributes that are positions along the op's dim (AttrRole::kPosition:
//     slice's begin and end, pad's before and after; kPositions: split's sizes)
//     scale with that dim's label, exactly.
// The signature at the new sizes must label every dim as before.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/op_schema.h"
#include "ir/ops/reshape.h"
#include "verify/findings.h"

namespace loom::verify {

// The law with label `extents` in place of its own (every label of the law must
// be listed; intervals, input shapes and size attributes are rescaled with it;
// free output labels, below, may be listed, else keep their size) and its key
// recomputed (verify/law_reduce.h chooses the extents). Errors when a bound or a
// dim does not scale exactly, the op does not build at the new sizes or its
// signature labels dims otherwise.
absl::StatusOr<LawUse> ResizeLaw(const LawUse& law, const std::map<std::string, int64_t>& extents);

// MoE routing kinds (moe_dispatch, moe_combine and their gradients) and the
// token label of one: dim 0 of its integer routing indices ("" when none).
bool IsRouting(ir::OpKind kind);
// An entry of ResizeLaw's extents that is no label: a routing law's new number
// of token groups, when its groups change size (tokens and slot columns per group
// follow from the labels' new extents).
inline constexpr char kRoutingGroups[] = "#groups";
std::string TokenLabel(const LawUse& law, const ir::DimSignature& sig);

// The free output labels of a law (see above), each with its current size; a
// reshape's size-1 output dims are not free (they stay 1).
absl::StatusOr<std::map<std::string, int64_t>> FreeOutputLabels(const LawUse& law,
                                                               const ir::DimSignature& sig);

// Attribute values that are positions along a label of the law (slice, pad,
// split): label -> the values.
absl::StatusOr<std::map<std::string, std::vector<int64_t>>> PositionAttrs(
    const LawUse& law, const ir::DimSignature& sig);

// The per-kind part of ReducedExtents, applied to the generic choice `out`:
// positions along a label keep their pattern in units, free output labels
// become min(size, 2), and a reshape's leading labels grow so that every group
// keeps integral dims and equal products.
absl::Status ReduceSizeLabels(const LawUse& law, const ir::DimSignature& sig,
                              std::map<std::string, int64_t>* out);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_LAW_RESIZE_H_
