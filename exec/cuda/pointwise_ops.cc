// The pointwise family of the CUDA backend: division, comparisons, logic and
// selection (inputs broadcast), the unary functions with their gradients, and casts.
// Attributes are read with the reference kernels' names, defaults and checks
// (ir/ops/pointwise.cc); the kernels live in pointwise_kernels.cu and
// broadcast_kernels.cu.

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/broadcast_kernels.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/pointwise_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

absl::StatusOr<BroadcastFn> CompareFn(const ir::AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string op, attrs.GetString("op"));
  if (op == "eq") return BroadcastFn::kEq;
  if (op == "ne") return BroadcastFn::kNe;
  if (op == "lt") return BroadcastFn::kLt;
  if (op == "le") return BroadcastFn::kLe;
  if (op == "gt") return BroadcastFn::kGt;
  if (op == "ge") return BroadcastFn::kGe;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'op' is '", op, "', expected eq, ne, lt, le, gt or ge"));
}

absl::StatusOr<BroadcastFn> LogicalFn(const ir::AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string op, attrs.GetString("op"));
  if (op == "and") return BroadcastFn::kAnd;
  if (op == "or") return BroadcastFn::kOr;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'op' is '", op, "', expected and or or"));
}

// The cast's map: bool is x != 0, integers truncate toward zero, floats keep
// their value (the run's element type rounds what it stores).
absl::StatusOr<MathFn> CastFn(const ir::AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string name, attrs.GetString("dtype"));
  LOOM_ASSIGN_OR_RETURN(ir::DType dtype, ir::ParseDType(name));
  if (dtype == ir::DType::kBool) return MathFn::kToBool;
  if (!ir::IsFloat(dtype)) return MathFn::kTrunc;
  return MathFn::kIdentity;
}

std::optional<MathFn> MathFor(OpKind kind) {
  switch (kind) {
    case OpKind::kSqrt: return MathFn::kSqrt;
    case OpKind::kSin: return MathFn::kSin;
    case OpKind::kCos: return MathFn::kCos;
    case OpKind::kTanh: return MathFn::kTanh;
    case OpKind::kSigmoid: return MathFn::kSigmoid;
    case OpKind::kRelu: return MathFn::kRelu;
    default: return std::nullopt;
  }
}

std::optional<PairGradFn> PairGradFor(OpKind kind) {
  switch (kind) {
    case OpKind::kReluGrad: return PairGradFn::kReluGrad;
    case OpKind::kSigmoidGrad: return PairGradFn::kSigmoidGrad;
    case OpKind::kTanhGrad: return PairGradFn::kTanhGrad;
    default: return std::nullopt;
  }
}

absl::Status RunBroadcast(OpKind kind, BroadcastFn fn, absl::Span<const DeviceTensor> in,
                          absl::Span<DeviceTensor> out, const OpContext& ctx) {
  const size_t inputs = fn == BroadcastFn::kWhere ? 3 : 2;
  LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, inputs, out));
  return LaunchStatus(
      LaunchBroadcast(fn, in.data(), static_cast<int>(in.size()), out[0], ctx.stream), kind);
}

}  // namespace

absl::Status RunPointwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx) {
  if (std::optional<MathFn> fn = MathFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 1, out));
    return LaunchStatus(LaunchMath(*fn, in[0], out[0], ctx.stream), kind);
  }
  if (std::optional<PairGradFn> fn = PairGradFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 2, out));
    if (in[0].size() != out[0].size() || in[1].size() != out[0].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " inputs differ in size from the output"));
    }
    return LaunchStatus(LaunchPairGrad(*fn, in[0], in[1], out[0], ctx.stream), kind);
  }
  switch (kind) {
    case OpKind::kDiv:
      return RunBroadcast(kind, BroadcastFn::kDiv, in, out, ctx);
    case OpKind::kWhere:
      return RunBroadcast(kind, BroadcastFn::kWhere, in, out, ctx);
    case OpKind::kCompare: {
      LOOM_ASSIGN_OR_RETURN(BroadcastFn fn, CompareFn(attrs));
      return RunBroadcast(kind, fn, in, out, ctx);
    }
    case OpKind::kLogical: {
      LOOM_ASSIGN_OR_RETURN(BroadcastFn fn, LogicalFn(attrs));
      return RunBroadcast(kind, fn, in, out, ctx);
    }
    case OpKind::kCast: {
      LOOM_ASSIGN_OR_RETURN(MathFn fn, CastFn(attrs));
      LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 1, out));
      return LaunchStatus(LaunchMath(fn, in[0], out[0], ctx.stream), kind);
    }
    default:
      return NotInFamily(kind, "pointwise");
  }
}

}  // namespace loom::exec::cuda
