// The shape family of the CUDA backend: reshape, transpose, slice, concat, split, pad
// and expand, all pure data movement. Attributes are read with the reference
// kernels' names, defaults and checks (ir/ops/shape.cc); the kernels live in
// shape_kernels.cu.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/shape_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::AttrMap;
using ir::OpKind;

// Internal unless the box of `extent` at `src_origin` lies inside `src` (a size-1
// dim of src broadcasting from origin 0) and the one at `dst_origin` inside `dst`:
// guards the copies against tensors that disagree with the op's attributes.
absl::Status CheckBox(OpKind kind, const DeviceTensor& src, const RankArray& src_origin,
                      const DeviceTensor& dst, const RankArray& dst_origin,
                      const RankArray& extent) {
  bool fits = src.rank == dst.rank;
  for (int d = 0; fits && d < src.rank; ++d) {
    const int64_t e = extent.v[d];
    const int64_t s = src_origin.v[d];
    const int64_t o = dst_origin.v[d];
    const bool src_fits = src.dims[d] == 1 ? s == 0 : s + e <= src.dims[d];
    fits = e >= 0 && s >= 0 && o >= 0 && src_fits && o + e <= dst.dims[d];
  }
  if (fits) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(ir::OpKindName(kind), ": a copy between ",
                                          DimsString(src), " and ", DimsString(dst),
                                          " does not fit the tensors"));
}

absl::Status CopyBox(OpKind kind, const DeviceTensor& src, const RankArray& src_origin,
                     const DeviceTensor& dst, const RankArray& dst_origin,
                     const RankArray& extent, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckBox(kind, src, src_origin, dst, dst_origin, extent));
  return LaunchStatus(LaunchCopyBox(src, src_origin, dst, dst_origin, extent, ctx.stream), kind);
}

RankArray DimsOf(const DeviceTensor& t) {
  RankArray a;
  for (int d = 0; d < t.rank; ++d) a.v[d] = t.dims[d];
  return a;
}

// The attribute `perm`, normalised against `rank`; it must be a permutation.
absl::StatusOr<RankArray> PermAttr(const AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> raw, attrs.GetInts("perm"));
  if (static_cast<int>(raw.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'perm' has ", raw.size(), " entries, expected ", rank, " (the input rank)"));
  }
  RankArray perm;
  uint32_t seen = 0;
  for (int i = 0; i < rank; ++i) {
    absl::StatusOr<int> d = ir::NormalizeDim(raw[i], rank);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("attribute 'perm': ", d.status().message()));
    }
    if ((seen >> *d) & 1u) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'perm' [", absl::StrJoin(raw, ","), "] names dim ", *d, " twice"));
    }
    seen |= 1u << *d;
    perm.v[i] = *d;
  }
  return perm;
}

// ---- shape ops ------------------------------------------------------------------------

absl::Status RunReshape(const DeviceTensor& a, const DeviceTensor& y, const OpContext& ctx) {
  if (a.size() != y.size()) {
    return absl::InternalError(absl::StrCat("reshape: cannot copy ", DimsString(a), " into ",
                                            DimsString(y)));
  }
  return LaunchStatus(LaunchFlatCopy(a, y, ctx.stream), OpKind::kReshape);
}

absl::Status RunTranspose(const AttrMap& attrs, const DeviceTensor& a, const DeviceTensor& y,
                          const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(RankArray perm, PermAttr(attrs, a.rank));
  bool match = y.rank == a.rank;
  for (int i = 0; match && i < a.rank; ++i) match = y.dims[i] == a.dims[perm.v[i]];
  if (!match) {
    return absl::InternalError(absl::StrCat("transpose: output ", DimsString(y),
                                            " is not a permutation of ", DimsString(a)));
  }
  return LaunchStatus(LaunchTranspose(a, perm, y, ctx.stream), OpKind::kTranspose);
}

// Positions [begin, end) of `dim`.
absl::Status RunSlice(const AttrMap& attrs, const DeviceTensor& a, const DeviceTensor& y,
                      const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, a.rank));
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("begin"));
  LOOM_ASSIGN_OR_RETURN(int64_t end, attrs.GetInt("end"));
  if (begin < 0 || begin >= end || end > a.dims[dim]) {
    return absl::InvalidArgumentError(absl::StrCat("slice [", begin, ", ", end,
                                                   ") is not a non-empty range of dim ", dim,
                                                   " (size ", a.dims[dim], ")"));
  }
  RankArray src_origin;
  src_origin.v[dim] = begin;
  RankArray extent = DimsOf(a);
  extent.v[dim] = end - begin;
  return CopyBox(OpKind::kSlice, a, src_origin, y, RankArray{}, extent, ctx);
}

// Each input in turn along `dim`.
absl::Status RunConcat(const AttrMap& attrs, absl::Span<const DeviceTensor> in,
                       const DeviceTensor& y, const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, in[0].rank));
  int64_t offset = 0;
  for (const DeviceTensor& x : in) {
    RankArray dst_origin;
    dst_origin.v[dim] = offset;
    LOOM_RETURN_IF_ERROR(CopyBox(OpKind::kConcat, x, RankArray{}, y, dst_origin, DimsOf(x), ctx));
    offset += x.dims[dim];
  }
  if (offset != y.dims[dim]) {
    return absl::InternalError(absl::StrCat("concat: inputs fill ", offset, " of dim ", dim,
                                            " of the output ", DimsString(y)));
  }
  return absl::OkStatus();
}

// Output i takes the next out[i].dims[dim] positions of `dim`; the sizes are the
// outputs' (the `sizes` attribute shaped them).
absl::Status RunSplit(const AttrMap& attrs, const DeviceTensor& a,
                      absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, a.rank));
  int64_t offset = 0;
  for (const DeviceTensor& piece : out) {
    RankArray src_origin;
    src_origin.v[dim] = offset;
    LOOM_RETURN_IF_ERROR(
        CopyBox(OpKind::kSplit, a, src_origin, piece, RankArray{}, DimsOf(piece), ctx));
    offset += piece.dims[dim];
  }
  if (offset != a.dims[dim]) {
    return absl::InternalError(absl::StrCat("split: outputs take ", offset, " of dim ", dim,
                                            " of the input ", DimsString(a)));
  }
  return absl::OkStatus();
}

// `before` zeros, the input, `after` zeros along `dim`; the zeros are the
// output's initial fill.
absl::Status RunPad(const AttrMap& attrs, const DeviceTensor& a, const DeviceTensor& y,
                    const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, a.rank));
  LOOM_ASSIGN_OR_RETURN(int64_t before, attrs.GetInt("before"));
  LOOM_ASSIGN_OR_RETURN(int64_t after, attrs.GetInt("after"));
  if (before < 0 || after < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("padding before=", before, " after=", after, " is negative"));
  }
  RankArray dst_origin;
  dst_origin.v[dim] = before;
  return CopyBox(OpKind::kPad, a, RankArray{}, y, dst_origin, DimsOf(a), ctx);
}

// The size-1 input repeated along `dim` to the output's extent.
absl::Status RunExpand(const AttrMap& attrs, const DeviceTensor& a, const DeviceTensor& y,
                       const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, a.rank));
  if (a.dims[dim] != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 0 has size ", a.dims[dim], " at dim ", dim, ", expected 1"));
  }
  bool match = y.rank == a.rank;
  for (int d = 0; match && d < a.rank; ++d) match = d == dim || y.dims[d] == a.dims[d];
  if (!match) {
    return absl::InternalError(absl::StrCat("expand: output ", DimsString(y),
                                            " does not extend ", DimsString(a), " along dim ",
                                            dim));
  }
  return CopyBox(OpKind::kExpand, a, RankArray{}, y, RankArray{}, DimsOf(y), ctx);
}

bool Owns(OpKind kind) {
  switch (kind) {
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kConcat:
    case OpKind::kSplit:
    case OpKind::kPad:
    case OpKind::kExpand:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunShapeOp(ir::OpKind kind, const ir::AttrMap& attrs,
                        absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                        const OpContext& ctx) {
  if (!Owns(kind)) return NotInFamily(kind, "shape");
  LOOM_RETURN_IF_ERROR(CheckArity(kind, in, out));
  switch (kind) {
    case OpKind::kReshape:
      return RunReshape(in[0], out[0], ctx);
    case OpKind::kTranspose:
      return RunTranspose(attrs, in[0], out[0], ctx);
    case OpKind::kSlice:
      return RunSlice(attrs, in[0], out[0], ctx);
    case OpKind::kConcat:
      return RunConcat(attrs, in, out[0], ctx);
    case OpKind::kSplit:
      return RunSplit(attrs, in[0], out, ctx);
    case OpKind::kPad:
      return RunPad(attrs, in[0], out[0], ctx);
    case OpKind::kExpand:
      return RunExpand(attrs, in[0], out[0], ctx);
    default:
      break;
  }
  return NotInFamily(kind, "shape");
}

}  // namespace loom::exec::cuda
