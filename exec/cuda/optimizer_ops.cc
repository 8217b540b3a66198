// The optimizer family of the CUDA backend: sgd, adamw and clip_coef. Attributes
// are read with the reference kernels' names, defaults and checks
// (ir/ops/optimizer.cc); the kernels live in optimizer_kernels.cu.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/optimizer_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::AttrMap;
using ir::OpKind;

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
    case OpKind::kAdamW:
    case OpKind::kSgd:
    case OpKind::kClipCoef:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunOptimizerOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx) {
  if (!Owns(kind)) return NotInFamily(kind, "optimizer");
  LOOM_RETURN_IF_ERROR(CheckArity(kind, in, out));
  switch (kind) {
    case OpKind::kAdamW:
      return RunAdamW(attrs, in, out, ctx);
    case OpKind::kSgd:
      return RunSgd(attrs, in, out[0], ctx);
    case OpKind::kClipCoef:
      return RunClipCoef(attrs, in[0], out[0], ctx);
    default:
      break;
  }
  return NotInFamily(kind, "optimizer");
}

}  // namespace loom::exec::cuda
