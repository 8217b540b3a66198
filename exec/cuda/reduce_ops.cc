// The reduce_shape family of the CUDA backend: reductions (sum, mean, max,
// max_grad, sum_squares), shape ops (reshape, transpose, slice, concat, split,
// pad, expand) and optimizer updates (adamw, sgd, clip_coef). Attributes are read
// with the reference kernels' names, defaults and checks (ir/ops/reduce.cc,
// ir/ops/shape_ops.cc, ir/ops/optimizer.cc); the kernels live in
// reduce_shape_kernels.cu.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/reduce_shape_kernels.h"
#include "ir/ops/op_attrs.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::AttrMap;
using ir::OpKind;

// ---- checks ------------------------------------------------------------------------

// The launchers index the tensors they are given and assume one element type:
// refuse a call whose tensor counts do not match the op's arity or whose tensors
// mix element types.
absl::Status CheckTensors(OpKind kind, absl::Span<const DeviceTensor> in,
                          absl::Span<const DeviceTensor> out) {
  const ir::OpArity arity = ir::GetOpArity(kind);
  const int num_in = static_cast<int>(in.size());
  const int num_out = static_cast<int>(out.size());
  const bool inputs_ok =
      num_in >= arity.min_inputs && (arity.max_inputs < 0 || num_in <= arity.max_inputs);
  const bool outputs_ok = arity.num_outputs < 0 ? num_out >= 1 : num_out == arity.num_outputs;
  if (!inputs_ok || !outputs_ok || num_in == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ir::OpKindName(kind), " on the CUDA backend got ", num_in, " inputs and ", num_out,
        " outputs"));
  }
  const bool f64 = in[0].f64;
  for (const absl::Span<const DeviceTensor> side : {in, out}) {
    for (const DeviceTensor& t : side) {
      if (t.f64 != f64) {
        return absl::InvalidArgumentError(
            absl::StrCat(ir::OpKindName(kind), " on the CUDA backend mixes f32 and f64 tensors"));
      }
    }
  }
  return absl::OkStatus();
}

// OK for a successful launch, else Internal naming the op.
absl::Status LaunchStatus(cudaError_t err, OpKind kind) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string name(ir::OpKindName(kind));
  return CudaError(err, name.c_str());
}

std::string DimsString(const DeviceTensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.dims, t.dims + t.rank, ","), "]");
}

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

// ---- attributes ----------------------------------------------------------------------

// The attribute `dim`, normalised against `rank` (negative dims count from the end).
absl::StatusOr<int> DimAttr(const AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  absl::StatusOr<int> n = ir::NormalizeDim(dim, rank);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'dim': ", n.status().message()));
  }
  return *n;
}

// The dims the attribute `dims` reduces, as a bit mask: each in [-rank, rank),
// none twice.
absl::StatusOr<uint32_t> ReducedDims(const AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dims"));
  uint32_t mask = 0;
  for (int64_t d : dims) {
    absl::StatusOr<int> n = ir::NormalizeDim(d, rank);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'dims': ", n.status().message()));
    }
    if ((mask >> *n) & 1u) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'dims' names dim ", *n, " more than once"));
    }
    mask |= 1u << *n;
  }
  return mask;
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

// adamw's attributes, read and checked as the reference reads them.
absl::StatusOr<AdamWParams> AdamWAttrs(const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(ir::ops::AdamWAttrs a, ir::ops::ParseAdamWAttrs(attrs));
  AdamWParams p;
  p.lr = a.lr;
  p.beta1 = a.beta1;
  p.beta2 = a.beta2;
  p.eps = a.eps;
  p.weight_decay = a.weight_decay;
  p.step = a.step;
  return p;
}

// ---- reductions ----------------------------------------------------------------------

absl::Status RunReduce(OpKind kind, ReduceKind reduce, const AttrMap& attrs,
                       const DeviceTensor& a, const DeviceTensor& y, const OpContext& ctx) {
  uint32_t mask = 0;
  if (reduce == ReduceKind::kSumSquares) {
    mask = a.rank == 0 ? 0u : (~0u >> (32 - a.rank));
  } else {
    LOOM_ASSIGN_OR_RETURN(mask, ReducedDims(attrs, a.rank));
  }
  int64_t kept = 1;
  for (int d = 0; d < a.rank; ++d) {
    if (!((mask >> d) & 1u)) kept *= a.dims[d];
  }
  if (kept != y.size()) {
    return absl::InternalError(absl::StrCat(ir::OpKindName(kind), ": output ", DimsString(y),
                                            " does not match the reduction of ", DimsString(a)));
  }
  int64_t mean_count = 1;
  if (reduce == ReduceKind::kMean) {
    ir::Shape shape(std::vector<int64_t>(a.dims, a.dims + a.rank));
    LOOM_ASSIGN_OR_RETURN(mean_count, ir::ops::MeanCount(shape, attrs));
  }
  return LaunchStatus(LaunchReduce(reduce, a, mask, mean_count, y, ctx.stream), kind);
}

// max(a) and max_grad(a, dy): `dim` of a, which must have an element along it.
absl::Status RunMax(OpKind kind, const AttrMap& attrs, absl::Span<const DeviceTensor> in,
                    const DeviceTensor& y, const OpContext& ctx) {
  const DeviceTensor& a = in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, DimAttr(attrs, a.rank));
  if (a.dims[dim] == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 0 has size 0 along dim ", dim, "; max needs an element"));
  }
  const int64_t reduced = a.size() / a.dims[dim];
  if (kind == OpKind::kMax) {
    if (y.size() != reduced) {
      return absl::InternalError(absl::StrCat("max: output ", DimsString(y),
                                              " does not match ", DimsString(a)));
    }
    return LaunchStatus(LaunchMax(a, dim, y, ctx.stream), kind);
  }
  const DeviceTensor& dy = in[1];
  if (dy.size() != reduced || y.size() != a.size()) {
    return absl::InternalError(absl::StrCat("max_grad: dy ", DimsString(dy), " and output ",
                                            DimsString(y), " do not match ", DimsString(a)));
  }
  return LaunchStatus(LaunchMaxGrad(a, dy, dim, y, ctx.stream), kind);
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

// ---- optimizer updates ------------------------------------------------------------------

bool SameSize(absl::Span<const DeviceTensor> tensors, int64_t n) {
  for (const DeviceTensor& t : tensors) {
    if (t.size() != n) return false;
  }
  return true;
}

// (param, grad) {lr, weight_decay=0} -> param - lr * (grad + weight_decay * param).
absl::Status RunSgd(const AttrMap& attrs, absl::Span<const DeviceTensor> in,
                    const DeviceTensor& y, const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(double lr, attrs.GetFloat("lr"));
  LOOM_ASSIGN_OR_RETURN(double weight_decay, attrs.GetFloat("weight_decay", 0.0));
  if (!SameSize(in, y.size())) {
    return absl::InternalError("sgd: param, grad and output differ in size");
  }
  return LaunchStatus(LaunchSgd(in[0], in[1], lr, weight_decay, y, ctx.stream), OpKind::kSgd);
}

// (param, grad, m, v) {lr, beta1, beta2, eps, weight_decay, step} -> (param', m', v').
absl::Status RunAdamW(const AttrMap& attrs, absl::Span<const DeviceTensor> in,
                      absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(AdamWParams p, AdamWAttrs(attrs));
  const int64_t n = in[0].size();
  if (!SameSize(in, n) || !SameSize(out, n)) {
    return absl::InternalError("adamw: param, grad, m, v and the outputs differ in size");
  }
  return LaunchStatus(
      LaunchAdamW(in[0], in[1], in[2], in[3], p, out[0], out[1], out[2], ctx.stream),
      OpKind::kAdamW);
}

// (total_sumsq) {max_norm, eps=1e-6} -> min(1, max_norm / (sqrt(total_sumsq) + eps)).
absl::Status RunClipCoef(const AttrMap& attrs, const DeviceTensor& total,
                         const DeviceTensor& y, const OpContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(double max_norm, attrs.GetFloat("max_norm"));
  if (!(max_norm > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'max_norm' is ", max_norm, ", expected a positive value"));
  }
  LOOM_ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps", 1e-6));
  if (total.size() != 1 || y.size() != 1) {
    return absl::InternalError(absl::StrCat("clip_coef: input ", DimsString(total),
                                            " and output ", DimsString(y),
                                            " must hold one element"));
  }
  return LaunchStatus(LaunchClipCoef(total, max_norm, eps, y, ctx.stream), OpKind::kClipCoef);
}

bool Owns(OpKind kind) {
  switch (kind) {
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax:
    case OpKind::kMaxGrad:
    case OpKind::kSumSquares:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kConcat:
    case OpKind::kSplit:
    case OpKind::kPad:
    case OpKind::kExpand:
    case OpKind::kAdamW:
    case OpKind::kSgd:
    case OpKind::kClipCoef:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunReduceShapeOp(OpKind kind, const AttrMap& attrs,
                              absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                              const OpContext& ctx) {
  if (!Owns(kind)) {
    return absl::UnimplementedError(absl::StrCat(
        "the reduce_shape family has no CUDA kernel for '", ir::OpKindName(kind), "'"));
  }
  LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, out));
  switch (kind) {
    case OpKind::kSum:
      return RunReduce(kind, ReduceKind::kSum, attrs, in[0], out[0], ctx);
    case OpKind::kMean:
      return RunReduce(kind, ReduceKind::kMean, attrs, in[0], out[0], ctx);
    case OpKind::kSumSquares:
      return RunReduce(kind, ReduceKind::kSumSquares, attrs, in[0], out[0], ctx);
    case OpKind::kMax:
    case OpKind::kMaxGrad:
      return RunMax(kind, attrs, in, out[0], ctx);
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
    case OpKind::kAdamW:
      return RunAdamW(attrs, in, out, ctx);
    case OpKind::kSgd:
      return RunSgd(attrs, in, out[0], ctx);
    case OpKind::kClipCoef:
      return RunClipCoef(attrs, in[0], out[0], ctx);
    default:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(
      "the reduce_shape family has no CUDA kernel for '", ir::OpKindName(kind), "'"));
}

}  // namespace loom::exec::cuda
