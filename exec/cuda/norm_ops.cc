// The norm family of the CUDA backend: rms_norm, layer_norm and their gradients.
// Reads `eps` as the reference kernels do (ir::ops::NormEps) and calls the launchers
// of norm_kernels.h.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/norm_kernels.h"
#include "exec/cuda/op_checks.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

bool Owns(OpKind kind) {
  switch (kind) {
    case OpKind::kRmsNorm:
    case OpKind::kRmsNormGrad:
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormGrad:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunNormOp(ir::OpKind kind, const ir::AttrMap& attrs,
                       absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                       const OpContext& ctx) {
  if (!Owns(kind)) return NotInFamily(kind, "norm");
  LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
  cudaStream_t stream = ctx.stream;
  switch (kind) {
    case OpKind::kRmsNorm: {  // (x, gamma) -> y
      LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
      return LaunchStatus(LaunchRmsNorm(in[0], in[1], eps, out[0], stream), kind);
    }
    case OpKind::kRmsNormGrad: {  // (x, gamma, dy) -> (dx, dgamma)
      LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
      return LaunchStatus(
          LaunchRmsNormGrad(in[0], in[1], in[2], eps, out[0], out[1], stream), kind);
    }
    case OpKind::kLayerNorm: {  // (x, gamma, beta) -> y
      LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
      return LaunchStatus(LaunchLayerNorm(in[0], in[1], in[2], eps, out[0], stream), kind);
    }
    case OpKind::kLayerNormGrad: {  // (x, gamma, dy) -> (dx, dgamma, dbeta)
      LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
      return LaunchStatus(
          LaunchLayerNormGrad(in[0], in[1], in[2], eps, out[0], out[1], out[2], stream), kind);
    }
    default:
      break;
  }
  return NotInFamily(kind, "norm");
}

}  // namespace loom::exec::cuda
