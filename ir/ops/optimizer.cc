// Optimizer ops: SGD, AdamW, grad-norm clipping.
// They run in the optimizer phase and have no gradient rules. The updates are
// elementwise (every dim spatial); clip_coef maps a scalar to a scalar.

#include <algorithm>
#include <cmath>

#include "ir/ops/op_attrs.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

// ---- attributes ---------------------------------------------------------------

namespace ops {
namespace {

// A beta in [0, 1); 1 would make the bias correction divide by zero.
absl::Status ExpectBeta(absl::string_view name, double beta) {
  if (!(beta >= 0.0 && beta < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' is ", beta, ", expected a value in [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace

// Every AdamW attribute is required.
absl::StatusOr<AdamWAttrs> ParseAdamWAttrs(const AttrMap& attrs) {
  AdamWAttrs a;
  LOOM_ASSIGN_OR_RETURN(a.lr, attrs.GetFloat("lr"));
  LOOM_ASSIGN_OR_RETURN(a.beta1, attrs.GetFloat("beta1"));
  LOOM_ASSIGN_OR_RETURN(a.beta2, attrs.GetFloat("beta2"));
  LOOM_ASSIGN_OR_RETURN(a.eps, attrs.GetFloat("eps"));
  LOOM_ASSIGN_OR_RETURN(a.weight_decay, attrs.GetFloat("weight_decay"));
  LOOM_ASSIGN_OR_RETURN(a.step, attrs.GetInt("step"));
  LOOM_RETURN_IF_ERROR(ExpectBeta("beta1", a.beta1));
  LOOM_RETURN_IF_ERROR(ExpectBeta("beta2", a.beta2));
  if (a.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'step' is ", a.step, ", expected at least 1"));
  }
  return a;
}

}  // namespace ops

namespace {

using ops::AdamWAttrs;
using ops::ElementwiseSignature;
using ops::ExpectFloat;
using ops::ExpectScalar;
using ops::FlopsPerOutputElement;

// ---- shape rules -----------------------------------------------------------------

// Float inputs with the dims of input 0; dtypes may differ (e.g. f32 state of a
// bf16 parameter).
absl::Status ExpectFloatsLikeFirst(absl::Span<const TensorType> in) {
  for (size_t i = 0; i < in.size(); ++i) {
    int index = static_cast<int>(i);
    LOOM_RETURN_IF_ERROR(ExpectFloat(in, index));
    LOOM_RETURN_IF_ERROR(ops::ExpectDims(in, index, in[0].shape.dims()));
  }
  return absl::OkStatus();
}

// (param, grad) {lr, weight_decay=0} -> param'.
absl::StatusOr<std::vector<TensorType>> InferSgd(absl::Span<const TensorType> in,
                                                 const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloatsLikeFirst(in));
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("lr").status());
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("weight_decay", 0.0).status());
  return std::vector<TensorType>{in[0]};
}

// (param, grad, m, v) -> (param', m', v'), each with the type of its old value.
absl::StatusOr<std::vector<TensorType>> InferAdamW(absl::Span<const TensorType> in,
                                                   const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloatsLikeFirst(in));
  LOOM_RETURN_IF_ERROR(ops::ParseAdamWAttrs(attrs).status());
  return std::vector<TensorType>{in[0], in[2], in[3]};
}

// (total_sumsq scalar) {max_norm, eps=1e-6} -> scalar.
absl::StatusOr<std::vector<TensorType>> InferClipCoef(absl::Span<const TensorType> in,
                                                      const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectScalar(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_ASSIGN_OR_RETURN(double max_norm, attrs.GetFloat("max_norm"));
  if (!(max_norm > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'max_norm' is ", max_norm, ", expected a positive value"));
  }
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("eps", 1e-6).status());
  return std::vector<TensorType>{in[0]};
}

// ---- signatures and FLOPs ------------------------------------------------------------

absl::StatusOr<DimSignature> SignatureSgd(absl::Span<const TensorType> in, const AttrMap&) {
  return ElementwiseSignature(in[0].shape.rank(), 2);
}

absl::StatusOr<DimSignature> SignatureAdamW(absl::Span<const TensorType> in, const AttrMap&) {
  return ElementwiseSignature(in[0].shape.rank(), 4, 3);
}

absl::StatusOr<DimSignature> SignatureClipCoef(absl::Span<const TensorType>, const AttrMap&) {
  return ElementwiseSignature(0, 1);
}

template <int kPerElement>
double Flops(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, kPerElement);
}

// ---- kernels -----------------------------------------------------------------------------

absl::Status KernelSgd(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                       absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double lr, attrs.GetFloat("lr"));
  LOOM_ASSIGN_OR_RETURN(double wd, attrs.GetFloat("weight_decay", 0.0));
  const HostTensor& param = *in[0];
  const HostTensor& grad = *in[1];
  for (int64_t i = 0; i < param.size(); ++i) {
    out[0][i] = param[i] - lr * (grad[i] + wd * param[i]);
  }
  return absl::OkStatus();
}

// PyTorch's AdamW: decoupled weight decay on the old parameter, bias-corrected moments.
absl::Status KernelAdamW(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                         absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(AdamWAttrs a, ops::ParseAdamWAttrs(attrs));
  const HostTensor& param = *in[0];
  const HostTensor& grad = *in[1];
  const HostTensor& m = *in[2];
  const HostTensor& v = *in[3];
  const double step = static_cast<double>(a.step);
  const double correction1 = 1.0 - std::pow(a.beta1, step);
  const double correction2 = 1.0 - std::pow(a.beta2, step);
  for (int64_t i = 0; i < param.size(); ++i) {
    double g = grad[i];
    double m_new = a.beta1 * m[i] + (1.0 - a.beta1) * g;
    double v_new = a.beta2 * v[i] + (1.0 - a.beta2) * g * g;
    double m_hat = m_new / correction1;
    double v_hat = v_new / correction2;
    out[0][i] = param[i] - a.lr * a.weight_decay * param[i] -
                a.lr * m_hat / (std::sqrt(v_hat) + a.eps);
    out[1][i] = m_new;
    out[2][i] = v_new;
  }
  return absl::OkStatus();
}

absl::Status KernelClipCoef(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                            absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double max_norm, attrs.GetFloat("max_norm"));
  LOOM_ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps", 1e-6));
  double norm = std::sqrt((*in[0])[0]);
  out[0][0] = std::min(1.0, max_norm / (norm + eps));
  return absl::OkStatus();
}

}  // namespace

void RegisterOptimizerOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 const char* doc) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, /*grad=*/nullptr, doc});
  };
  reg(OpKind::kAdamW, InferAdamW, SignatureAdamW, KernelAdamW, Flops<12>,
      "adamw(param, grad, m, v) {lr, beta1, beta2, eps, weight_decay, step} -> "
      "(param', m', v'), PyTorch AdamW");
  reg(OpKind::kClipCoef, InferClipCoef, SignatureClipCoef, KernelClipCoef, Flops<4>,
      "clip_coef(total_sumsq) {max_norm, eps=1e-6} -> "
      "min(1, max_norm / (sqrt(total_sumsq) + eps))");
  reg(OpKind::kSgd, InferSgd, SignatureSgd, KernelSgd, Flops<3>,
      "sgd(param, grad) {lr, weight_decay=0} -> param - lr * (grad + weight_decay * param)");
}

}  // namespace loom::ir
