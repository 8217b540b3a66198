// Symbolic kernels of the optimizer family (reference kernels: ir/ops/optimizer.cc):
// sgd, adamw, clip_coef. Constants the reference computes from attributes alone (the
// bias corrections, 1 - beta) enter as the doubles it computes.

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

using ir::ops::AdamWAttrs;
using ir::ops::ParseAdamWAttrs;

// param - lr * (grad + weight_decay * param).
Outputs SymSgd(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double lr, attrs.GetFloat("lr"));
  LOOM_ASSIGN_OR_RETURN(double wd, attrs.GetFloat("weight_decay", 0.0));
  const SymTensor& param = *in[0];
  const SymTensor& grad = *in[1];
  const TermId lr_t = terms.Double(lr);
  const TermId wd_t = terms.Double(wd);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (size_t i = 0; i < param.data.size(); ++i) {
    const TermId step = terms.Add(grad.data[i], terms.Mul(wd_t, param.data[i]));
    out[0].data[i] = terms.Sub(param.data[i], terms.Mul(lr_t, step));
  }
  return out;
}

// PyTorch's AdamW: m' = beta1 m + (1 - beta1) g, v' = beta2 v + (1 - beta2) g^2,
// param' = param - lr wd param - lr (m' / c1) / (sqrt(v' / c2) + eps) with the bias
// corrections c_i = 1 - beta_i^step.
Outputs SymAdamW(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(AdamWAttrs a, ParseAdamWAttrs(attrs));
  const SymTensor& param = *in[0];
  const SymTensor& grad = *in[1];
  const SymTensor& m = *in[2];
  const SymTensor& v = *in[3];
  const double step = static_cast<double>(a.step);
  const TermId inv_c1 = terms.Inv(terms.Double(1.0 - std::pow(a.beta1, step)));
  const TermId inv_c2 = terms.Inv(terms.Double(1.0 - std::pow(a.beta2, step)));
  const TermId beta1 = terms.Double(a.beta1);
  const TermId beta2 = terms.Double(a.beta2);
  const TermId one_minus_beta1 = terms.Double(1.0 - a.beta1);
  const TermId one_minus_beta2 = terms.Double(1.0 - a.beta2);
  const TermId lr = terms.Double(a.lr);
  const TermId decay = terms.Double(a.lr * a.weight_decay);
  const TermId eps = terms.Double(a.eps);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (size_t i = 0; i < param.data.size(); ++i) {
    const TermId g = grad.data[i];
    const TermId m_new = terms.Add(terms.Mul(beta1, m.data[i]), terms.Mul(one_minus_beta1, g));
    const TermId v_new =
        terms.Add(terms.Mul(beta2, v.data[i]), terms.Product({one_minus_beta2, g, g}));
    const TermId m_hat = terms.Mul(m_new, inv_c1);
    const TermId v_hat = terms.Mul(v_new, inv_c2);
    const TermId update = terms.Product({lr, m_hat, terms.Inv(terms.Add(Sqrt(terms, v_hat), eps))});
    out[0].data[i] = terms.Sub(terms.Sub(param.data[i], terms.Mul(decay, param.data[i])), update);
    out[1].data[i] = m_new;
    out[2].data[i] = v_new;
  }
  return out;
}

// min(1, max_norm / (sqrt(total_sumsq) + eps)).
Outputs SymClipCoef(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double max_norm, attrs.GetFloat("max_norm"));
  LOOM_ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps", 1e-6));
  const TermId norm = Sqrt(terms, in[0]->data[0]);
  const TermId coef = terms.Div(terms.Double(max_norm), terms.Add(norm, terms.Double(eps)));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  out[0].data[0] = Min(terms, terms.One(), coef);
  return out;
}

}  // namespace

std::vector<SymKernel> OptimizerSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kAdamW, SymAdamW>(),
      MakeSymKernel<OpKind::kClipCoef, SymClipCoef>(),
      MakeSymKernel<OpKind::kSgd, SymSgd>(),
  };
}

}  // namespace loom::verify::internal
