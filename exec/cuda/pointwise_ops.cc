// The pointwise family of the CUDA backend: broadcasting arithmetic, comparisons,
// logic and selection, the unary functions with their gradients, casts, and the
// index ops. Attributes are read with the reference kernels' names, defaults and
// checks (ir/ops/pointwise.cc, ir/ops/elementwise.cc, ir/ops/index_ops.cc); the
// kernels live in pointwise_kernels.cu.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/pointwise_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

absl::Status CheckCounts(OpKind kind, absl::Span<const DeviceTensor> in, size_t inputs,
                         absl::Span<DeviceTensor> out) {
  if (in.size() != inputs || out.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(ir::OpKindName(kind), " on the CUDA backend got ",
                                                   in.size(), " inputs and ", out.size(),
                                                   " outputs, expected ", inputs, " and 1"));
  }
  for (const DeviceTensor& t : in) {
    if (t.f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes element types"));
    }
  }
  return absl::OkStatus();
}

absl::Status Launched(OpKind kind, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string name(ir::OpKindName(kind));
  return CudaError(err, name.c_str());
}

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
  return Launched(kind, LaunchBroadcast(fn, in.data(), static_cast<int>(in.size()), out[0],
                                        ctx.stream));
}

absl::Status RunCumsum(const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                       absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckCounts(OpKind::kCumsum, in, 1, out));
  const DeviceTensor& x = in[0];
  LOOM_ASSIGN_OR_RETURN(int64_t attr, attrs.GetInt("dim"));
  LOOM_ASSIGN_OR_RETURN(const int d, ir::NormalizeDim(attr, x.rank));
  return Launched(OpKind::kCumsum, LaunchCumsum(x, x.Product(0, d), x.dim(d),
                                                x.Product(d + 1, x.rank), out[0], ctx.stream));
}

absl::Status RunIndex(absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                      const OpContext& ctx) {
  if (in.empty() || out.size() != 1) {
    return absl::InvalidArgumentError("index on the CUDA backend needs x and one output");
  }
  const int k = static_cast<int>(in.size()) - 1;
  int bad_dim = -1;
  double bad_value = 0;
  LOOM_RETURN_IF_ERROR(Launched(
      OpKind::kIndex, LaunchIndex(in[0], in.data() + 1, k, out[0], ctx.stream, &bad_dim, &bad_value)));
  if (bad_dim < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("index ", bad_value, " is out of range for dim ",
                                                 bad_dim, " of size ", in[0].dim(bad_dim)));
}

}  // namespace

absl::Status RunPointwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx) {
  if (std::optional<MathFn> fn = MathFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 1, out));
    return Launched(kind, LaunchMath(*fn, in[0], out[0], ctx.stream));
  }
  if (std::optional<PairGradFn> fn = PairGradFor(kind)) {
    LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 2, out));
    if (in[0].size() != out[0].size() || in[1].size() != out[0].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " inputs differ in size from the output"));
    }
    return Launched(kind, LaunchPairGrad(*fn, in[0], in[1], out[0], ctx.stream));
  }
  switch (kind) {
    case OpKind::kAdd:
      return RunBroadcast(kind, BroadcastFn::kAdd, in, out, ctx);
    case OpKind::kSub:
      return RunBroadcast(kind, BroadcastFn::kSub, in, out, ctx);
    case OpKind::kMul:
      return RunBroadcast(kind, BroadcastFn::kMul, in, out, ctx);
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
      return Launched(kind, LaunchMath(fn, in[0], out[0], ctx.stream));
    }
    case OpKind::kArange: {
      LOOM_RETURN_IF_ERROR(CheckCounts(kind, in, 0, out));
      LOOM_ASSIGN_OR_RETURN(double start, attrs.GetFloat("start"));
      LOOM_ASSIGN_OR_RETURN(double step, attrs.GetFloat("step"));
      return Launched(kind, LaunchArange(start, step, out[0], ctx.stream));
    }
    case OpKind::kCumsum:
      return RunCumsum(attrs, in, out, ctx);
    case OpKind::kIndex:
      return RunIndex(in, out, ctx);
    default:
      return absl::UnimplementedError(
          absl::StrCat(ir::OpKindName(kind), " is not a pointwise op of the CUDA backend"));
  }
}

}  // namespace loom::exec::cuda
