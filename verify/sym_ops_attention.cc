// Symbolic kernels of the attention family (reference kernels: ir/ops/attention.cc):
// attention, attention_grad and rope. Layouts are [batch, sequence, heads, head dim].

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "ir/ops/op_attrs.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

using ir::ops::AttentionDims;

absl::StatusOr<AttentionDims> GetAttentionDims(Inputs in, const ir::AttrMap& attrs) {
  std::vector<ir::TensorType> types;
  for (int i = 0; i < 3; ++i) types.push_back({in[i]->shape, in[i]->dtype});
  return ir::ops::GetAttentionDims(types, attrs);
}

// Offset of element [b, pos, head, x] of a row-major [B, L, H, D] tensor.
int64_t At(const ir::Shape& s, int64_t b, int64_t pos, int64_t head, int64_t x) {
  return ((b * s.dim(1) + pos) * s.dim(2) + head) * s.dim(3) + x;
}

// scale * <q_i, k_j> for the keys query i of head h in batch b sees.
std::vector<TermId> Scores(smt::Terms& terms, const AttentionDims& d, const SymTensor& q,
                           const SymTensor& k, int64_t b, int64_t h, int64_t i) {
  const int64_t g = h / d.group();
  const TermId scale = terms.Double(d.scale);
  std::vector<TermId> scores;
  for (int64_t j = 0, n = d.Visible(i); j < n; ++j) {
    std::vector<TermId> products;
    for (int64_t x = 0; x < d.dk; ++x) {
      products.push_back(
          terms.Mul(q.data[At(q.shape, b, i, h, x)], k.data[At(k.shape, b, j, g, x)]));
    }
    scores.push_back(terms.Mul(scale, terms.Sum(products)));
  }
  return scores;
}

// out_i = (sum_j exp(S_ij) v_j) / sum_j exp(S_ij) and lse_i = log(sum_j exp(S_ij)):
// the reference kernel's shift by the row's largest score dropped (equal over the
// reals), so that partial softmaxes merge in canonical terms (MergedValue). A row
// that sees no key holds 0 and log(0).
Outputs SymAttention(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const SymTensor& v = *in[2];
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        std::vector<TermId> weights = Scores(terms, d, *in[0], *in[1], b, h, i);
        for (TermId& w : weights) w = Exp(terms, w);
        const TermId total = terms.Sum(weights);
        out[1].data[(b * d.s + i) * d.hq + h] = Log(terms, total);
        if (weights.empty()) continue;
        const TermId inv_total = terms.Inv(total);
        for (int64_t x = 0; x < d.dv; ++x) {
          std::vector<TermId> acc;
          for (size_t j = 0; j < weights.size(); ++j) {
            acc.push_back(
                terms.Mul(weights[j], v.data[At(v.shape, b, static_cast<int64_t>(j), g, x)]));
          }
          out[0].data[At(out[0].shape, b, i, h, x)] = terms.Mul(terms.Sum(acc), inv_total);
        }
      }
    }
  }
  return out;
}

// With the forward's out o and log-sum-exp L: P_ij = exp(S_ij - L_i), dv = P^T do,
// dP = do v^T, dS = P * (dP - rowsum(do * o) + dL), dq = scale dS k, dk = scale dS^T q
// (dL the log-sum-exp's gradient where given); kv gradients sum over the query heads
// of their group.
Outputs SymAttentionGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs,
                         OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const SymTensor& q = *in[0];
  const SymTensor& k = *in[1];
  const SymTensor& v = *in[2];
  const SymTensor& o = *in[3];
  const SymTensor& lse = *in[4];
  const SymTensor& dout = *in[5];
  const TermId scale = terms.Double(d.scale);
  // Contributions to each output element, summed at the end.
  std::vector<std::vector<std::vector<TermId>>> parts(3);
  for (int r = 0; r < 3; ++r) parts[r].resize(in[r]->data.size());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        const TermId row_lse = lse.data[(b * d.s + i) * d.hq + h];
        std::vector<TermId> row;
        for (int64_t x = 0; x < d.dv; ++x) {
          row.push_back(terms.Mul(dout.data[At(dout.shape, b, i, h, x)],
                                  o.data[At(o.shape, b, i, h, x)]));
        }
        if (in.size() > 6) row.push_back(terms.Neg(in[6]->data[(b * d.s + i) * d.hq + h]));
        const TermId row_dot = terms.Sum(row);
        const std::vector<TermId> scores = Scores(terms, d, q, k, b, h, i);
        for (int64_t j = 0; j < static_cast<int64_t>(scores.size()); ++j) {
          const TermId p = Exp(terms, terms.Sub(scores[j], row_lse));
          std::vector<TermId> products;
          for (int64_t x = 0; x < d.dv; ++x) {
            products.push_back(
                terms.Mul(dout.data[At(dout.shape, b, i, h, x)], v.data[At(v.shape, b, j, g, x)]));
          }
          const TermId ds = terms.Mul(scale, terms.Mul(p, terms.Sub(terms.Sum(products), row_dot)));
          for (int64_t x = 0; x < d.dk; ++x) {
            parts[0][At(q.shape, b, i, h, x)].push_back(
                terms.Mul(ds, k.data[At(k.shape, b, j, g, x)]));
            parts[1][At(k.shape, b, j, g, x)].push_back(
                terms.Mul(ds, q.data[At(q.shape, b, i, h, x)]));
          }
          for (int64_t x = 0; x < d.dv; ++x) {
            parts[2][At(v.shape, b, j, g, x)].push_back(
                terms.Mul(p, dout.data[At(dout.shape, b, i, h, x)]));
          }
        }
      }
    }
  }
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int r = 0; r < 3; ++r) {
    for (size_t e = 0; e < parts[r].size(); ++e) out[r].data[e] = terms.Sum(parts[r][e]);
  }
  return out;
}

// Two partial softmaxes of the same rows merged (MergedValue, MergedLogSumExp).
Outputs SymAttentionMerge(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& o1 = *in[0];
  const SymTensor& l1 = *in[1];
  const SymTensor& o2 = *in[2];
  const SymTensor& l2 = *in[3];
  const int64_t dv = o1.shape.dim(3);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (size_t r = 0; r < l1.data.size(); ++r) {
    const TermId lses[2] = {l1.data[r], l2.data[r]};
    out[1].data[r] = MergedLogSumExp(terms, lses);
    for (int64_t x = 0; x < dv; ++x) {
      const size_t e = r * static_cast<size_t>(dv) + static_cast<size_t>(x);
      const TermId values[2] = {o1.data[e], o2.data[e]};
      out[0].data[e] = MergedValue(terms, values, lses);
    }
  }
  return out;
}

// Rotate-half RoPE: for i < d/2 the pair (i, i + d/2) at position offset + `pos`
// turns by that position times theta^(-2i/d) (the opposite way when inverse). The
// angles are constants: their cosines and sines are the doubles the reference
// kernel computes.
Outputs SymRope(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double theta, attrs.GetFloat("theta", 10000.0));
  if (!(theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'theta' is ", theta, ", expected a positive number"));
  }
  LOOM_ASSIGN_OR_RETURN(bool inverse, FlagAttr(attrs, "inverse", 0));
  LOOM_ASSIGN_OR_RETURN(int64_t offset, attrs.GetInt("offset", 0));
  const SymTensor& x = *in[0];
  const ir::Shape& s = x.shape;
  const int64_t d = s.dim(3);
  const int64_t half = d / 2;
  const double sign = inverse ? -1.0 : 1.0;
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t pos = 0; pos < s.dim(1); ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          sign * static_cast<double>(offset + pos) * std::pow(theta, -2.0 * static_cast<double>(i) / d);
      const TermId c = terms.Double(std::cos(angle));
      const TermId sn = terms.Double(std::sin(angle));
      for (int64_t b = 0; b < s.dim(0); ++b) {
        for (int64_t h = 0; h < s.dim(2); ++h) {
          const TermId x1 = x.data[At(s, b, pos, h, i)];
          const TermId x2 = x.data[At(s, b, pos, h, i + half)];
          out[0].data[At(s, b, pos, h, i)] = terms.Sub(terms.Mul(x1, c), terms.Mul(x2, sn));
          out[0].data[At(s, b, pos, h, i + half)] = terms.Add(terms.Mul(x2, c), terms.Mul(x1, sn));
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<SymKernel> AttentionSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kAttention, SymAttention>(2),
      MakeSymKernel<OpKind::kAttentionGrad, SymAttentionGrad>(2),
      MakeSymKernel<OpKind::kAttentionMerge, SymAttentionMerge>(),
      MakeSymKernel<OpKind::kRope, SymRope>(2),
  };
}

}  // namespace loom::verify::internal
