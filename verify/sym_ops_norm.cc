// Symbolic kernels of the norm family (reference kernels: ir/ops/norm.cc):
// layernorm, layernorm_grad, rmsnorm, rmsnorm_grad, all over the last dim.
// rstd = 1 / sqrt(statistic + eps), with eps inside the square root.

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

// Per-row statistics: xhat = (x - mean) * rstd.
struct RowStats {
  TermId mean;
  TermId rstd;
};

// 1 / sqrt(statistic + eps).
TermId Rstd(smt::Terms& terms, TermId statistic, double eps) {
  return terms.Inv(Sqrt(terms, terms.Add(statistic, terms.Double(eps))));
}

// LayerNorm statistics (biased variance) of one row; d > 0.
RowStats LayerNormStats(smt::Terms& terms, absl::Span<const TermId> row, double eps) {
  RowStats s;
  s.mean = Mean(terms, row);
  std::vector<TermId> squares;
  for (TermId x : row) {
    const TermId c = terms.Sub(x, s.mean);
    squares.push_back(terms.Mul(c, c));
  }
  s.rstd = Rstd(terms, Mean(terms, squares), eps);
  return s;
}

// RMSNorm statistics of one row: no centring; d > 0.
RowStats RmsNormStats(smt::Terms& terms, absl::Span<const TermId> row, double eps) {
  std::vector<TermId> squares;
  for (TermId x : row) squares.push_back(terms.Mul(x, x));
  return RowStats{terms.Zero(), Rstd(terms, Mean(terms, squares), eps)};
}

// y = (x - mean) * rstd * gamma + beta.
Outputs SymLayerNorm(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
  const SymTensor& x = *in[0];
  const SymTensor& gamma = *in[1];
  const SymTensor& beta = *in[2];
  const int64_t d = LastDim(x.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (d == 0) return out;
  for (int64_t r = 0; r < NumRows(x.shape); ++r) {
    std::vector<TermId> row = Slice(x, r * d, d);
    RowStats s = LayerNormStats(terms, row, eps);
    for (int64_t j = 0; j < d; ++j) {
      out[0].data[r * d + j] = terms.Add(
          terms.Product({terms.Sub(row[j], s.mean), s.rstd, gamma.data[j]}), beta.data[j]);
    }
  }
  return out;
}

// With xhat the normalised row and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum dy * xhat,
// dbeta = sum dy. RMSNorm (centred = false) has no mean and no dbeta.
Outputs NormGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types,
                 bool centred) {
  LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
  const SymTensor& x = *in[0];
  const SymTensor& gamma = *in[1];
  const SymTensor& dy = *in[2];
  const int64_t d = LastDim(x.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (d == 0) return out;
  std::vector<std::vector<TermId>> dgamma(static_cast<size_t>(d));
  std::vector<std::vector<TermId>> dbeta(static_cast<size_t>(d));
  for (int64_t r = 0; r < NumRows(x.shape); ++r) {
    std::vector<TermId> row = Slice(x, r * d, d);
    RowStats s = centred ? LayerNormStats(terms, row, eps) : RmsNormStats(terms, row, eps);
    std::vector<TermId> xhat(d), g(d), gx(d);
    for (int64_t j = 0; j < d; ++j) {
      const TermId dyj = dy.data[r * d + j];
      xhat[j] = terms.Mul(terms.Sub(row[j], s.mean), s.rstd);
      g[j] = terms.Mul(dyj, gamma.data[j]);
      gx[j] = terms.Mul(g[j], xhat[j]);
      dgamma[j].push_back(terms.Mul(dyj, xhat[j]));
      dbeta[j].push_back(dyj);
    }
    const TermId mean_g = centred ? Mean(terms, g) : terms.Zero();
    const TermId mean_gx = Mean(terms, gx);
    for (int64_t j = 0; j < d; ++j) {
      out[0].data[r * d + j] =
          terms.Mul(s.rstd, terms.Sub(terms.Sub(g[j], mean_g), terms.Mul(xhat[j], mean_gx)));
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    out[1].data[j] = terms.Sum(dgamma[j]);
    if (centred) out[2].data[j] = terms.Sum(dbeta[j]);
  }
  return out;
}

Outputs SymLayerNormGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  return NormGrad(terms, in, attrs, out_types, /*centred=*/true);
}

// y = x * rstd * gamma.
Outputs SymRmsNorm(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(double eps, ir::ops::NormEps(attrs));
  const SymTensor& x = *in[0];
  const SymTensor& gamma = *in[1];
  const int64_t d = LastDim(x.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (d == 0) return out;
  for (int64_t r = 0; r < NumRows(x.shape); ++r) {
    std::vector<TermId> row = Slice(x, r * d, d);
    RowStats s = RmsNormStats(terms, row, eps);
    for (int64_t j = 0; j < d; ++j) {
      out[0].data[r * d + j] = terms.Product({row[j], s.rstd, gamma.data[j]});
    }
  }
  return out;
}

Outputs SymRmsNormGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  return NormGrad(terms, in, attrs, out_types, /*centred=*/false);
}

}  // namespace

std::vector<SymKernel> NormSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kLayerNorm, SymLayerNorm>(),
      MakeSymKernel<OpKind::kLayerNormGrad, SymLayerNormGrad>(),
      MakeSymKernel<OpKind::kRmsNorm, SymRmsNorm>(),
      MakeSymKernel<OpKind::kRmsNormGrad, SymRmsNormGrad>(),
  };
}

}  // namespace loom::verify::internal
