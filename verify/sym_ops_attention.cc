// Symbolic kernels of the attention family (reference kernels: ir/ops/attention.cc):
// attention, attention_grad and rope. Layouts are [batch, sequence, heads, head dim].

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

// Sizes and attributes of one attention call (shapes checked by shape inference).
struct AttentionDims {
  int64_t batch = 0;
  int64_t s = 0;
  int64_t t = 0;
  int64_t hq = 0;
  int64_t hkv = 0;
  int64_t dk = 0;
  int64_t dv = 0;
  bool causal = true;
  double scale = 1.0;

  int64_t group() const { return hq / hkv; }
};

absl::StatusOr<AttentionDims> GetAttentionDims(Inputs in, const ir::AttrMap& attrs) {
  AttentionDims d;
  d.batch = in[0]->shape.dim(0);
  d.s = in[0]->shape.dim(1);
  d.hq = in[0]->shape.dim(2);
  d.dk = in[0]->shape.dim(3);
  d.t = in[1]->shape.dim(1);
  d.hkv = in[1]->shape.dim(2);
  d.dv = in[2]->shape.dim(3);
  if (d.hkv < 1 || d.hq % d.hkv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query heads (", d.hq, ") are not a multiple of key/value heads (", d.hkv, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(d.causal, FlagAttr(attrs, "causal", 1));
  if (d.causal && d.s != d.t) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'causal': causal attention needs as many queries (", d.s,
                     ") as keys (", d.t, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(d.scale,
                        attrs.GetFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.dk))));
  return d;
}

// Offset of element [b, pos, head, x] of a row-major [B, L, H, D] tensor.
int64_t At(const ir::Shape& s, int64_t b, int64_t pos, int64_t head, int64_t x) {
  return ((b * s.dim(1) + pos) * s.dim(2) + head) * s.dim(3) + x;
}

// Softmax weights of query i of head h in batch b over the keys it sees (i + 1 keys
// when causal): exp(score - max) / total with score = scale * <q, k>.
std::vector<TermId> AttentionWeights(smt::Terms& terms, const AttentionDims& d, const SymTensor& q,
                                     const SymTensor& k, int64_t b, int64_t h, int64_t i) {
  const int64_t g = h / d.group();
  const int64_t n = d.causal ? i + 1 : d.t;
  if (n == 0) return {};
  const TermId scale = terms.Double(d.scale);
  std::vector<TermId> scores;
  scores.reserve(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    std::vector<TermId> products;
    for (int64_t x = 0; x < d.dk; ++x) {
      products.push_back(
          terms.Mul(q.data[At(q.shape, b, i, h, x)], k.data[At(k.shape, b, j, g, x)]));
    }
    scores.push_back(terms.Mul(scale, terms.Sum(products)));
  }
  return Softmax(terms, scores);
}

Outputs SymAttention(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const SymTensor& v = *in[2];
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        std::vector<TermId> p = AttentionWeights(terms, d, *in[0], *in[1], b, h, i);
        for (int64_t x = 0; x < d.dv; ++x) {
          std::vector<TermId> acc;
          for (size_t j = 0; j < p.size(); ++j) {
            acc.push_back(terms.Mul(p[j], v.data[At(v.shape, b, static_cast<int64_t>(j), g, x)]));
          }
          out[0].data[At(out[0].shape, b, i, h, x)] = terms.Sum(acc);
        }
      }
    }
  }
  return out;
}

// With P = softmax(S), S = scale q k^T: dv = P^T do, dP = do v^T,
// dS = P * (dP - rowsum(P * dP)), dq = scale dS k, dk = scale dS^T q; kv gradients
// sum over the query heads of their group.
Outputs SymAttentionGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const SymTensor& q = *in[0];
  const SymTensor& k = *in[1];
  const SymTensor& v = *in[2];
  const SymTensor& dout = *in[3];
  const TermId scale = terms.Double(d.scale);
  // Contributions to each output element, summed at the end.
  std::vector<std::vector<std::vector<TermId>>> parts(3);
  for (int o = 0; o < 3; ++o) parts[o].resize(in[o]->data.size());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        std::vector<TermId> p = AttentionWeights(terms, d, q, k, b, h, i);
        const int64_t n = static_cast<int64_t>(p.size());
        std::vector<TermId> dp(p.size());
        std::vector<TermId> weighted;
        for (int64_t j = 0; j < n; ++j) {
          std::vector<TermId> products;
          for (int64_t x = 0; x < d.dv; ++x) {
            products.push_back(
                terms.Mul(dout.data[At(dout.shape, b, i, h, x)], v.data[At(v.shape, b, j, g, x)]));
          }
          dp[j] = terms.Sum(products);
          weighted.push_back(terms.Mul(p[j], dp[j]));
        }
        const TermId row_dot = terms.Sum(weighted);
        for (int64_t j = 0; j < n; ++j) {
          const TermId ds = terms.Mul(scale, terms.Mul(p[j], terms.Sub(dp[j], row_dot)));
          for (int64_t x = 0; x < d.dk; ++x) {
            parts[0][At(q.shape, b, i, h, x)].push_back(
                terms.Mul(ds, k.data[At(k.shape, b, j, g, x)]));
            parts[1][At(k.shape, b, j, g, x)].push_back(
                terms.Mul(ds, q.data[At(q.shape, b, i, h, x)]));
          }
          for (int64_t x = 0; x < d.dv; ++x) {
            parts[2][At(v.shape, b, j, g, x)].push_back(
                terms.Mul(p[j], dout.data[At(dout.shape, b, i, h, x)]));
          }
        }
      }
    }
  }
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int o = 0; o < 3; ++o) {
    for (size_t e = 0; e < parts[o].size(); ++e) out[o].data[e] = terms.Sum(parts[o][e]);
  }
  return out;
}

// Rotate-half RoPE: for i < d/2 the pair (i, i + d/2) at position `pos` turns by
// pos * theta^(-2i/d) (the opposite way when inverse). The angles are constants:
// their cosines and sines are the doubles the reference kernel computes.
Outputs SymRope(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double theta, attrs.GetFloat("theta", 10000.0));
  if (!(theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'theta' is ", theta, ", expected a positive number"));
  }
  LOOM_ASSIGN_OR_RETURN(bool inverse, FlagAttr(attrs, "inverse", 0));
  const SymTensor& x = *in[0];
  const ir::Shape& s = x.shape;
  const int64_t d = s.dim(3);
  const int64_t half = d / 2;
  const double sign = inverse ? -1.0 : 1.0;
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t pos = 0; pos < s.dim(1); ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          sign * static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / d);
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
      MakeSymKernel<OpKind::kAttention, SymAttention>(),
      MakeSymKernel<OpKind::kAttentionGrad, SymAttentionGrad>(),
      MakeSymKernel<OpKind::kRope, SymRope>(),
  };
}

}  // namespace loom::verify::internal
