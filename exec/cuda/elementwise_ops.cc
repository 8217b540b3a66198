// The elementwise family of the CUDA backend: arithmetic, activations and their
// gradients, scalar-tensor products, gradient accumulation, stop_gradient, fill
// and rope. Attributes are read with the reference kernels' names, defaults and
// checks (ir/ops/elementwise.cc, ir/ops/attention.cc); the kernels live in
// elementwise_kernels.cu.

#include "exec/cuda/cuda_ops.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/elementwise_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

// The launchers index the tensors they are given and assume one element type:
// refuse a call with too few tensors or with mixed element types.
absl::Status CheckTensors(OpKind kind, absl::Span<const DeviceTensor> in, size_t min_inputs,
                          absl::Span<DeviceTensor> out, size_t num_outputs) {
  if (in.size() < min_inputs || out.size() < num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(ir::OpKindName(kind), " on the CUDA backend got ", in.size(), " inputs and ",
                     out.size(), " outputs, expected at least ", min_inputs, " and ", num_outputs));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " input ", i, " is ", in[i].f64 ? "f64" : "f32",
                       " but its output is ", out[0].f64 ? "f64" : "f32"));
    }
  }
  for (size_t i = 1; i < num_outputs; ++i) {
    if (out[i].f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " outputs mix element types"));
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

// rope {theta=10000, inverse=0} on x [b, s, h, d], d even.
absl::Status RunRope(const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                     absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckTensors(OpKind::kRope, in, 1, out, 1));
  LOOM_ASSIGN_OR_RETURN(double theta, attrs.GetFloat("theta", 10000.0));
  LOOM_ASSIGN_OR_RETURN(int64_t inverse, attrs.GetInt("inverse", 0));
  if (!(theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'theta' is ", theta, ", expected a positive number"));
  }
  if (inverse != 0 && inverse != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'inverse' is ", inverse, ", expected 0 or 1"));
  }
  const DeviceTensor& x = in[0];
  if (x.rank != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope input has ", x.rank, " dims, expected 4 [b, s, h, d]"));
  }
  if (x.dim(3) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope input has odd head size ", x.dim(3), ", expected an even one"));
  }
  return LaunchStatus(LaunchRope(x, theta, inverse == 1, out[0], ctx.stream), OpKind::kRope);
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
    // Inputs that broadcast (add, sub, mul) are the pointwise family's.
    if (in[0].size() != out[0].size() || in[1].size() != out[0].size()) {
      return absl::UnimplementedError(
          absl::StrCat(ir::OpKindName(kind), ": broadcasting inputs are pointwise ops"));
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
    case OpKind::kRope:
      return RunRope(attrs, in, out, ctx);
    default:
      return absl::UnimplementedError(
          absl::StrCat(ir::OpKindName(kind), " is not an elementwise op of the CUDA backend"));
  }
}

}  // namespace loom::exec::cuda
