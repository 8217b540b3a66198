// The reduce family of the CUDA backend: sum, mean, sum_squares, max and max_grad,
// and softmax, log_softmax and their gradients. Attributes are read with the
// reference kernels' names, defaults and checks (ir/ops/reduce.cc); the kernels live
// in reduce_kernels.cu.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/reduce_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/ops/op_attrs.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::AttrMap;
using ir::OpKind;

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

bool IsReduction(OpKind kind) {
  switch (kind) {
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax:
    case OpKind::kMaxGrad:
    case OpKind::kSumSquares:
      return true;
    default:
      return false;
  }
}

bool IsSoftmax(OpKind kind) {
  switch (kind) {
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmax:
    case OpKind::kLogSoftmaxGrad:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunReduceOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx) {
  // Each group checks its tensors as its launchers need (op_checks.h).
  if (IsReduction(kind)) {
    LOOM_RETURN_IF_ERROR(CheckArity(kind, in, out));
  } else if (IsSoftmax(kind)) {
    LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
  } else {
    return NotInFamily(kind, "reduce");
  }
  cudaStream_t stream = ctx.stream;
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
    case OpKind::kSoftmax:  // (x) -> y
      return LaunchStatus(LaunchSoftmax(in[0], out[0], stream), kind);
    case OpKind::kLogSoftmax:  // (x) -> y
      return LaunchStatus(LaunchLogSoftmax(in[0], out[0], stream), kind);
    case OpKind::kSoftmaxGrad:  // (y, dy) -> dx
      return LaunchStatus(LaunchSoftmaxGrad(in[0], in[1], out[0], stream), kind);
    case OpKind::kLogSoftmaxGrad:  // (y, dy) -> dx
      return LaunchStatus(LaunchLogSoftmaxGrad(in[0], in[1], out[0], stream), kind);
    default:
      break;
  }
  return NotInFamily(kind, "reduce");
}

}  // namespace loom::exec::cuda
