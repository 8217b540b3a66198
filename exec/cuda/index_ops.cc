// The index family of the CUDA backend: arange, cumsum and index. Attributes are
// read with the reference kernels' names, defaults and checks (ir/ops/index.cc);
// the kernels live in index_kernels.cu.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/index_kernels.h"
#include "exec/cuda/op_checks.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

absl::Status RunCumsum(const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                       absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckCounts(OpKind::kCumsum, in, 1, out));
  const DeviceTensor& x = in[0];
  LOOM_ASSIGN_OR_RETURN(int64_t attr, attrs.GetInt("dim"));
  LOOM_ASSIGN_OR_RETURN(const int d, ir::NormalizeDim(attr, x.rank));
  return LaunchStatus(LaunchCumsum(x, x.Product(0, d), x.dim(d), x.Product(d + 1, x.rank),
                                   out[0], ctx.stream),
                      OpKind::kCumsum);
}

absl::Status RunIndex(absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                      const OpContext& ctx) {
  if (in.empty() || out.size() != 1) {
    return absl::InvalidArgumentError("index on the CUDA backend needs x and one output");
  }
  const int k = static_cast<int>(in.size()) - 1;
  int bad_dim = -1;
  double bad_value = 0;
  LOOM_RETURN_IF_ERROR(LaunchStatus(
      LaunchIndex(in[0], in.data() + 1, k, out[0], ctx.stream, &bad_dim, &bad_value),
      OpKind::kIndex));
  if (bad_dim < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("index ", bad_value, " is out of range for dim ",
                                                 bad_dim, " of size ", in[0].dim(bad_dim)));
}

}  // namespace

absl::Status RunIndexOp(ir::OpKind kind, const ir::AttrMap& attrs,
                        absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                        const OpContext& ctx) {
  switch (kind) {
    case OpKind::kArange: {
      LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 0, out));
      LOOM_ASSIGN_OR_RETURN(double start, attrs.GetFloat("start"));
      LOOM_ASSIGN_OR_RETURN(double step, attrs.GetFloat("step"));
      return LaunchStatus(LaunchArange(start, step, out[0], ctx.stream), kind);
    }
    case OpKind::kCumsum:
      return RunCumsum(attrs, in, out, ctx);
    case OpKind::kIndex:
      return RunIndex(in, out, ctx);
    default:
      return NotInFamily(kind, "index");
  }
}

}  // namespace loom::exec::cuda
