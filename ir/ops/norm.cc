// LayerNorm and RMSNorm over the last dim.
// The normalised dim d is fixed (gamma and beta carry it); leading dims are spatial.
// In the gradients the leading dims are reductions: dx carries them (it is sliced),
// while dgamma and dbeta sum over them (they become partial sums).

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ir/ops/op_attrs.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::DimLabels;
using ops::ExpectDims;
using ops::ExpectFloat;
using ops::ExpectMinRank;
using ops::ExpectSameType;
using ops::FlopsPerOutputElement;

// ---- shared helpers -----------------------------------------------------------

// x [..., d] float, then each of the inputs `params` a float [d].
absl::Status CheckNormInputs(absl::Span<const TensorType> in, std::vector<int> params,
                             const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 1));
  const int64_t d = in[0].shape.dim(in[0].shape.rank() - 1);
  for (int i : params) {
    LOOM_RETURN_IF_ERROR(ExpectFloat(in, i));
    LOOM_RETURN_IF_ERROR(ExpectDims(in, i, {d}));
  }
  return ops::NormEps(attrs).status();
}

// Rows of length d of a [..., d] tensor.
struct RowView {
  int64_t rows = 1;
  int64_t d = 0;
};

RowView Rows(const Shape& shape) {
  RowView v;
  for (int i = 0; i + 1 < shape.rank(); ++i) v.rows *= shape.dim(i);
  v.d = shape.dim(shape.rank() - 1);
  return v;
}

// Per-row statistics: xhat = (x - mean) * rstd.
struct RowStats {
  double mean = 0.0;
  double rstd = 0.0;
};

// LayerNorm statistics (biased variance) of one row.
RowStats LayerNormStats(const double* x, int64_t d, double eps) {
  RowStats s;
  for (int64_t j = 0; j < d; ++j) s.mean += x[j];
  s.mean /= static_cast<double>(d);
  double var = 0.0;
  for (int64_t j = 0; j < d; ++j) var += (x[j] - s.mean) * (x[j] - s.mean);
  var /= static_cast<double>(d);
  s.rstd = 1.0 / std::sqrt(var + eps);
  return s;
}

// RMSNorm statistics of one row: no centring.
RowStats RmsNormStats(const double* x, int64_t d, double eps) {
  RowStats s;
  double ms = 0.0;
  for (int64_t j = 0; j < d; ++j) ms += x[j] * x[j];
  ms /= static_cast<double>(d);
  s.rstd = 1.0 / std::sqrt(ms + eps);
  return s;
}

// ---- shape rules ----------------------------------------------------------------

// layernorm(x, gamma, beta), rmsnorm(x, gamma).
absl::StatusOr<std::vector<TensorType>> InferNorm(absl::Span<const TensorType> in,
                                                  const AttrMap& attrs) {
  std::vector<int> params;
  for (int i = 1; i < static_cast<int>(in.size()); ++i) params.push_back(i);
  LOOM_RETURN_IF_ERROR(CheckNormInputs(in, params, attrs));
  return std::vector<TensorType>{in[0]};
}

// layernorm_grad(x, gamma, dy) -> (dx, dgamma, dbeta).
absl::StatusOr<std::vector<TensorType>> InferLayerNormGrad(absl::Span<const TensorType> in,
                                                           const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckNormInputs(in, {1}, attrs));
  LOOM_RETURN_IF_ERROR(ExpectSameType(in, 0, 2));
  return std::vector<TensorType>{in[0], in[1], in[1]};
}

// rmsnorm_grad(x, gamma, dy) -> (dx, dgamma).
absl::StatusOr<std::vector<TensorType>> InferRmsNormGrad(absl::Span<const TensorType> in,
                                                         const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckNormInputs(in, {1}, attrs));
  LOOM_RETURN_IF_ERROR(ExpectSameType(in, 0, 2));
  return std::vector<TensorType>{in[0], in[1]};
}

// ---- signatures -----------------------------------------------------------------

// "d0 .. dn, dn, ... -> d0 .. dn | dn:fixed": leading labels spatial.
absl::StatusOr<DimSignature> SignatureNorm(absl::Span<const TensorType> in, const AttrMap&) {
  std::vector<std::string> labels = DimLabels(in[0].shape.rank());
  DimSignature sig;
  sig.inputs = {labels};
  for (size_t i = 1; i < in.size(); ++i) sig.inputs.push_back({labels.back()});
  sig.outputs = {labels};
  sig.kinds[labels.back()] = DimKind::kFixed;
  ops::DefaultSpatial(sig);
  return sig;
}

// x, gamma, dy -> dx, dgamma[, dbeta]: leading labels are reductions (dx is sliced
// along them, the parameter gradients become partial sums), the last is fixed.
DimSignature NormGradSignature(int rank, int num_param_grads) {
  std::vector<std::string> labels = DimLabels(rank);
  DimSignature sig;
  sig.inputs = {labels, {labels.back()}, labels};
  sig.outputs = {labels};
  for (int i = 0; i < num_param_grads; ++i) sig.outputs.push_back({labels.back()});
  for (int i = 0; i + 1 < rank; ++i) sig.kinds[labels[i]] = DimKind::kReduction;
  sig.kinds[labels.back()] = DimKind::kFixed;
  return sig;
}

absl::StatusOr<DimSignature> SignatureLayerNormGrad(absl::Span<const TensorType> in,
                                                    const AttrMap&) {
  return NormGradSignature(in[0].shape.rank(), /*num_param_grads=*/2);
}

absl::StatusOr<DimSignature> SignatureRmsNormGrad(absl::Span<const TensorType> in,
                                                  const AttrMap&) {
  return NormGradSignature(in[0].shape.rank(), /*num_param_grads=*/1);
}

template <int kPerElement>
double Flops(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, kPerElement);
}

// ---- kernels ------------------------------------------------------------------------

// y = (x - mean) / sqrt(var + eps) * gamma + beta.
absl::Status KernelLayerNorm(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                             absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double eps, ops::NormEps(attrs));
  const HostTensor& x = *in[0];
  const HostTensor& gamma = *in[1];
  const HostTensor& beta = *in[2];
  RowView v = Rows(x.shape);
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = &x.data[r * v.d];
    RowStats s = LayerNormStats(row, v.d, eps);
    for (int64_t j = 0; j < v.d; ++j) {
      out[0][r * v.d + j] = (row[j] - s.mean) * s.rstd * gamma[j] + beta[j];
    }
  }
  return absl::OkStatus();
}

// With xhat the normalised row and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum dy * xhat, dbeta = sum dy.
absl::Status KernelLayerNormGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                 absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double eps, ops::NormEps(attrs));
  const HostTensor& x = *in[0];
  const HostTensor& gamma = *in[1];
  const HostTensor& dy = *in[2];
  RowView v = Rows(x.shape);
  std::vector<double> xhat(v.d), g(v.d);
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = &x.data[r * v.d];
    RowStats s = LayerNormStats(row, v.d, eps);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t j = 0; j < v.d; ++j) {
      xhat[j] = (row[j] - s.mean) * s.rstd;
      g[j] = dy[r * v.d + j] * gamma[j];
      mean_g += g[j];
      mean_gx += g[j] * xhat[j];
      out[1][j] += dy[r * v.d + j] * xhat[j];
      out[2][j] += dy[r * v.d + j];
    }
    mean_g /= static_cast<double>(v.d);
    mean_gx /= static_cast<double>(v.d);
    for (int64_t j = 0; j < v.d; ++j) {
      out[0][r * v.d + j] = s.rstd * (g[j] - mean_g - xhat[j] * mean_gx);
    }
  }
  return absl::OkStatus();
}

// y = x / sqrt(mean(x^2) + eps) * gamma.
absl::Status KernelRmsNorm(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                           absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double eps, ops::NormEps(attrs));
  const HostTensor& x = *in[0];
  const HostTensor& gamma = *in[1];
  RowView v = Rows(x.shape);
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = &x.data[r * v.d];
    RowStats s = RmsNormStats(row, v.d, eps);
    for (int64_t j = 0; j < v.d; ++j) out[0][r * v.d + j] = row[j] * s.rstd * gamma[j];
  }
  return absl::OkStatus();
}

// With xhat = x * rstd and g = dy * gamma:
// dx = rstd * (g - xhat * mean(g * xhat)), dgamma = sum dy * xhat.
absl::Status KernelRmsNormGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                               absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double eps, ops::NormEps(attrs));
  const HostTensor& x = *in[0];
  const HostTensor& gamma = *in[1];
  const HostTensor& dy = *in[2];
  RowView v = Rows(x.shape);
  std::vector<double> xhat(v.d), g(v.d);
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = &x.data[r * v.d];
    RowStats s = RmsNormStats(row, v.d, eps);
    double mean_gx = 0.0;
    for (int64_t j = 0; j < v.d; ++j) {
      xhat[j] = row[j] * s.rstd;
      g[j] = dy[r * v.d + j] * gamma[j];
      mean_gx += g[j] * xhat[j];
      out[1][j] += dy[r * v.d + j] * xhat[j];
    }
    mean_gx /= static_cast<double>(v.d);
    for (int64_t j = 0; j < v.d; ++j) {
      out[0][r * v.d + j] = s.rstd * (g[j] - xhat[j] * mean_gx);
    }
  }
  return absl::OkStatus();
}

// ---- gradient rules -----------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

Grads GradLayerNorm(GradBuilder& b) {
  AttrMap attrs = b.op().attrs;
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> d,
                        b.Emit(OpKind::kLayerNormGrad, {b.input(0), b.input(1), dy},
                               std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{d[0], d[1], d[2]};
}

Grads GradRmsNorm(GradBuilder& b) {
  AttrMap attrs = b.op().attrs;
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> d,
                        b.Emit(OpKind::kRmsNormGrad, {b.input(0), b.input(1), dy},
                               std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{d[0], d[1]};
}

}  // namespace

void RegisterNormOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc});
  };
  reg(OpKind::kLayerNorm, InferNorm, SignatureNorm, KernelLayerNorm, Flops<8>, GradLayerNorm,
      "layernorm(x [..., d], gamma [d], beta [d]) {eps=1e-5} -> normalised over the last dim");
  reg(OpKind::kLayerNormGrad, InferLayerNormGrad, SignatureLayerNormGrad, KernelLayerNormGrad,
      Flops<16>, nullptr, "layernorm_grad(x, gamma, dy) {eps} -> (dx, dgamma, dbeta)")
      .Homogeneous({2}, 1);
  reg(OpKind::kRmsNorm, InferNorm, SignatureNorm, KernelRmsNorm, Flops<6>, GradRmsNorm,
      "rmsnorm(x [..., d], gamma [d]) {eps=1e-5} -> x / sqrt(mean(x^2) + eps) * gamma");
  reg(OpKind::kRmsNormGrad, InferRmsNormGrad, SignatureRmsNormGrad, KernelRmsNormGrad,
      Flops<12>, nullptr, "rmsnorm_grad(x, gamma, dy) {eps} -> (dx, dgamma)")
      .Homogeneous({2}, 1);
}

namespace ops {

absl::StatusOr<double> NormEps(const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps", 1e-5));
  if (!(eps >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'eps' is ", eps, ", expected a non-negative number"));
  }
  return eps;
}

}  // namespace ops

}  // namespace loom::ir
