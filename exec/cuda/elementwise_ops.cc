// The elementwise family of the CUDA backend: arithmetic, activations and their
// gradients, scalar-tensor products, gradient accumulation, stop_gradient and fill.
// Attributes are read with the reference kernels' names, defaults and checks
// (ir/ops/elementwise.cc); the kernels live in elementwise_kernels.cu, those of add,
// sub and mul whose inputs broadcast in broadcast_kernels.cu.

#include "exec/cuda/cuda_ops.h"

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/broadcast_kernels.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/elementwise_kernels.h"
#include "exec/cuda/op_checks.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

std::optional<UnaryFn> UnaryFor(OpKind kind) {
  switch (kind) {
    case OpKind::kNeg:
      return UnaryFn::kNeg;
    case OpKind::kExp:
      return UnaryFn::kExp;
    case OpKind::kLog:
      return UnaryFn::kLog;
    case OpKind::kRsqrt:
      return UnaryFn::kRsqrt;
    case OpKind::kGelu:
      return UnaryFn::kGelu;
    case OpKind::kGeluExact:
      return UnaryFn::kGeluExact;
    case OpKind::kSilu:
      return UnaryFn::kSilu;
    case OpKind::kStopGradient:
      return UnaryFn::kIdentity;
    default:
      return std::nullopt;
  }
}

std::optional<BinaryFn> BinaryFor(OpKind kind) {
  switch (kind) {
    case OpKind::kAdd:
      return BinaryFn::kAdd;
    case OpKind::kSub:
      return BinaryFn::kSub;
    case OpKind::kMul:
      return BinaryFn::kMul;
    case OpKind::kGeluGrad:
      return BinaryFn::kGeluGrad;
    case OpKind::kGeluExactGrad:
      return BinaryFn::kGeluExactGrad;
    case OpKind::kSiluGrad:
      return BinaryFn::kSiluGrad;
    case OpKind::kSwiGlu:
      return BinaryFn::kSwiGlu;
    default:
      return std::nullopt;
  }
}

// add, sub and mul whose inputs broadcast to the output (NumPy's rule); the other
// two-input maps have no CUDA kernel for inputs that differ in size.
absl::Status RunBroadcast(OpKind kind, absl::Span<const DeviceTensor> in,
                          absl::Span<DeviceTensor> out, const OpContext& ctx) {
  BroadcastFn fn;
  switch (kind) {
    case OpKind::kAdd:
      fn = BroadcastFn::kAdd;
      break;
    case OpKind::kSub:
      fn = BroadcastFn::kSub;
      break;
    case OpKind::kMul:
      fn = BroadcastFn::kMul;
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat(ir::OpKindName(kind), ": no CUDA kernel for inputs that broadcast"));
  }
  LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 2, out));
  return LaunchStatus(
      LaunchBroadcast(fn, in.data(), static_cast<int>(in.size()), out[0], ctx.stream), kind);
}

// mul_scalar / div_scalar: x and a one-element scalar s.
absl::Status RunTensorScalar(OpKind kind, absl::Span<const DeviceTensor> in,
                             absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 2, out, 1));
  if (in[1].size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(ir::OpKindName(kind), " scalar input has ",
                                                   in[1].size(), " elements, expected 1"));
  }
  const ScalarFn fn = kind == OpKind::kDivScalar ? ScalarFn::kDiv : ScalarFn::kMul;
  return LaunchStatus(LaunchTensorScalar(fn, in[0], in[1], out[0], ctx.stream), kind);
}

}  // namespace

absl::Status RunElementwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                              absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                              const OpContext& ctx) {
  if (std::optional<UnaryFn> fn = UnaryFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 1, out, 1));
    return LaunchStatus(LaunchUnary(*fn, in[0], out[0], ctx.stream), kind);
  }
  if (std::optional<BinaryFn> fn = BinaryFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 2, out, 1));
    if (in[0].size() != out[0].size() || in[1].size() != out[0].size()) {
      return RunBroadcast(kind, in, out, ctx);
    }
    return LaunchStatus(LaunchBinary(*fn, in[0], in[1], out[0], ctx.stream), kind);
  }
  switch (kind) {
    case OpKind::kAccumulate: {
      LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 1, out, 1));
      return LaunchStatus(
          LaunchAccumulate(in.data(), static_cast<int>(in.size()), out[0], ctx.stream), kind);
    }
    case OpKind::kScale: {
      LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 1, out, 1));
      LOOM_ASSIGN_OR_RETURN(double factor, attrs.GetFloat("factor"));
      return LaunchStatus(LaunchScale(in[0], factor, out[0], ctx.stream), kind);
    }
    case OpKind::kPow: {
      LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 1, out, 1));
      LOOM_ASSIGN_OR_RETURN(double exponent, attrs.GetFloat("exponent"));
      return LaunchStatus(LaunchPow(in[0], exponent, out[0], ctx.stream), kind);
    }
    case OpKind::kMulScalar:
    case OpKind::kDivScalar:
      return RunTensorScalar(kind, in, out, ctx);
    case OpKind::kSwiGluGrad: {
      LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 3, out, 2));
      return LaunchStatus(LaunchSwiGluGrad(in[0], in[1], in[2], out[0], out[1], ctx.stream), kind);
    }
    case OpKind::kFill: {
      LOOM_RETURN_IF_ERROR(CheckTensors(kind, in, 0, out, 1));
      LOOM_ASSIGN_OR_RETURN(double value, attrs.GetFloat("value"));
      return LaunchStatus(LaunchFill(out[0], value, ctx.stream), kind);
    }
    default:
      return NotInFamily(kind, "elementwise");
  }
}

}  // namespace loom::exec::cuda
