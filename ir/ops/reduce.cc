// Reductions and softmax. Reduced dims are removed from the result (no keepdim). A sum
// may be split along a reduced dim into partial sums and a max into partial maxima; a
// mean too, into partial sums, each piece dividing by the whole op's count (its
// `count` attribute); a softmax axis may not. The losses built on them live in
// loss.cc.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ir/ops/element_index.h"
#include "ir/ops/op_attrs.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/ops/reduce_util.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::AxisAttr;
using ops::AxisView;
using ops::DefaultSpatial;
using ops::DimLabels;
using ops::ElementCount;
using ops::ExpectDims;
using ops::ExpectFloat;
using ops::ExpectMinRank;
using ops::ExpectSameType;
using ops::Flops;
using ops::FlopsPerInput;
using ops::Like;
using ops::LogSumExp;
using ops::ProjectIndices;
using ops::ReducedDims;
using ops::RowMax;
using ops::Rows;
using ops::ViewAround;

// ---- shared helpers -----------------------------------------------------------

std::vector<int64_t> KeptDims(const Shape& shape, const std::vector<bool>& reduced) {
  std::vector<int64_t> kept;
  for (int d = 0; d < shape.rank(); ++d) {
    if (!reduced[d]) kept.push_back(shape.dim(d));
  }
  return kept;
}

std::vector<bool> OnlyDim(int rank, int dim) {
  std::vector<bool> reduced(rank, false);
  reduced[dim] = true;
  return reduced;
}

// Number of elements folded into each output element.
double ReducedCount(const Shape& shape, const std::vector<bool>& reduced) {
  double count = 1.0;
  for (int d = 0; d < shape.rank(); ++d) {
    if (reduced[d]) count *= static_cast<double>(shape.dim(d));
  }
  return count;
}

// The count a mean divides by (ops::MeanCount), from its checked reduced dims.
absl::StatusOr<int64_t> MeanDivisor(const Shape& shape, const std::vector<bool>& reduced,
                                    const AttrMap& attrs) {
  if (!attrs.Has("count")) return static_cast<int64_t>(ReducedCount(shape, reduced));
  LOOM_ASSIGN_OR_RETURN(int64_t count, attrs.GetInt("count"));
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'count' is ", count, ", expected at least 1"));
  }
  return count;
}

// ---- shape rules ----------------------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferReduce(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(in[0].shape, attrs));
  return std::vector<TensorType>{Like(in[0], KeptDims(in[0].shape, reduced))};
}

// A mean's `count`, where set, is at least 1.
absl::StatusOr<std::vector<TensorType>> InferMean(absl::Span<const TensorType> in,
                                                  const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorType> out, InferReduce(in, attrs));
  LOOM_RETURN_IF_ERROR(ops::MeanCount(in[0].shape, attrs).status());
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferMax(absl::Span<const TensorType> in,
                                                 const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 1));
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(in[0].shape, attrs));
  if (in[0].shape.dim(dim) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 0 has size 0 along dim ", dim, "; max needs an element"));
  }
  const int rank = in[0].shape.rank();
  return std::vector<TensorType>{Like(in[0], KeptDims(in[0].shape, OnlyDim(rank, dim)))};
}

// max_grad(a, dy): dy has the dims of max(a).
absl::StatusOr<std::vector<TensorType>> InferMaxGrad(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorType> reduced, InferMax(in.subspan(0, 1), attrs));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 1, reduced[0].shape.dims()));
  return std::vector<TensorType>{in[0]};
}

absl::StatusOr<std::vector<TensorType>> InferSumSquares(absl::Span<const TensorType> in,
                                                        const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  return std::vector<TensorType>{Like(in[0], {})};
}

// softmax, log_softmax and their gradients: same-typed inputs of rank >= 1.
absl::StatusOr<std::vector<TensorType>> InferLastDim(absl::Span<const TensorType> in,
                                                     const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 1));
  for (size_t i = 1; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectSameType(in, 0, static_cast<int>(i)));
  }
  return std::vector<TensorType>{in[0]};
}

// ---- signatures -----------------------------------------------------------------

// Input labels d0..dn; output keeps the labels not reduced; reduced ones get `kind`.
DimSignature ReduceSignature(int rank, const std::vector<bool>& reduced, DimKind kind) {
  DimSignature sig;
  std::vector<std::string> labels = DimLabels(rank);
  std::vector<std::string> kept;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      sig.kinds[labels[d]] = kind;
    } else {
      kept.push_back(labels[d]);
    }
  }
  sig.inputs = {labels};
  sig.outputs = {kept};
  DefaultSpatial(sig);
  return sig;
}

absl::StatusOr<DimSignature> SignatureSum(absl::Span<const TensorType> in,
                                          const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(in[0].shape, attrs));
  return ReduceSignature(in[0].shape.rank(), reduced, DimKind::kReduction);
}

// A piece of a mean over a chunk of its reduced dims, dividing by the whole op's
// count (ShardAttrsMean), is a partial sum of it: the reduced dims split as a sum's.
absl::StatusOr<DimSignature> SignatureMean(absl::Span<const TensorType> in,
                                           const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(in[0].shape, attrs));
  return ReduceSignature(in[0].shape.rank(), reduced, DimKind::kReduction);
}

// A piece that holds a chunk of a reduced dim divides by the logical op's count
// (a mean over the chunk divides by its own: the piece times the ratio, which the
// verifier reads off the attribute); a piece with every reduced dim whole keeps
// the op's attributes.
absl::StatusOr<AttrMap> ShardAttrsMean(const AttrMap& attrs, absl::Span<const TensorType> in,
                                       absl::Span<const Box> in_boxes,
                                       absl::Span<const TensorType>, absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(in[0].shape, attrs));
  bool split = false;
  for (int d = 0; d < in[0].shape.rank(); ++d) {
    if (!reduced[d] || in_boxes.empty() || static_cast<int>(in_boxes[0].size()) <= d) continue;
    const Interval& iv = in_boxes[0][d];
    if (iv.begin != 0 || iv.end != in[0].shape.dim(d)) split = true;
  }
  if (!split) return attrs;
  LOOM_ASSIGN_OR_RETURN(int64_t count, ops::MeanCount(in[0].shape, attrs));
  AttrMap piece = attrs;
  piece.Set("count", count);
  return piece;
}

// A max over a piece of `dim` is a partial maximum: the label max-reduces.
absl::StatusOr<DimSignature> SignatureMax(absl::Span<const TensorType> in,
                                          const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(in[0].shape, attrs));
  const int rank = in[0].shape.rank();
  return ReduceSignature(rank, OnlyDim(rank, dim), DimKind::kMaxReduction);
}

// max_grad(a, dy) -> da: `dim` fixed (the argmax needs the whole dim), every other
// dim spatial.
absl::StatusOr<DimSignature> SignatureMaxGrad(absl::Span<const TensorType> in,
                                              const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(in[0].shape, attrs));
  const int rank = in[0].shape.rank();
  DimSignature sig = ReduceSignature(rank, OnlyDim(rank, dim), DimKind::kFixed);
  sig.inputs.push_back(sig.outputs[0]);
  sig.outputs = {sig.inputs[0]};
  return sig;
}

absl::StatusOr<DimSignature> SignatureSumSquares(absl::Span<const TensorType> in,
                                                 const AttrMap&) {
  const int rank = in[0].shape.rank();
  return ReduceSignature(rank, std::vector<bool>(rank, true), DimKind::kReduction);
}

// Every input and the output carry the same labels; the last one is fixed.
absl::StatusOr<DimSignature> SignatureLastDimFixed(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  const int rank = in[0].shape.rank();
  DimSignature sig = ops::ElementwiseSignature(rank, static_cast<int>(in.size()));
  sig.kinds[DimLabels(rank).back()] = DimKind::kFixed;
  return sig;
}

// ---- FLOPs ------------------------------------------------------------------------

// One add per input element, one divide per output element.
double FlopsMean(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                 const AttrMap&) {
  return ElementCount(in[0]) + ElementCount(out[0]);
}

// ---- kernels ------------------------------------------------------------------------

absl::Status KernelSum(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                       absl::Span<HostTensor> out) {
  const HostTensor& a = *in[0];
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced,
                        ReducedDims(a.shape, attrs));
  std::vector<int64_t> index = ProjectIndices(a.shape, reduced);
  for (int64_t i = 0; i < a.size(); ++i) out[0][index[i]] += a[i];
  return absl::OkStatus();
}

absl::Status KernelMean(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                        absl::Span<HostTensor> out) {
  LOOM_RETURN_IF_ERROR(KernelSum(in, attrs, out));
  LOOM_ASSIGN_OR_RETURN(int64_t count, ops::MeanCount(in[0]->shape, attrs));
  for (double& x : out[0].data) x /= static_cast<double>(count);
  return absl::OkStatus();
}

absl::Status KernelMax(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                       absl::Span<HostTensor> out) {
  const HostTensor& a = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(a.shape, attrs));
  AxisView v = ViewAround(a.shape, dim);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      double m = a[v.at(o, 0, i)];
      for (int64_t k = 1; k < v.n; ++k) m = std::max(m, a[v.at(o, k, i)]);
      out[0][o * v.inner + i] = m;
    }
  }
  return absl::OkStatus();
}

// da = dy at the first position of the max along `dim`, 0 elsewhere.
absl::Status KernelMaxGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                           absl::Span<HostTensor> out) {
  const HostTensor& a = *in[0];
  const HostTensor& dy = *in[1];
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(a.shape, attrs));
  AxisView v = ViewAround(a.shape, dim);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < v.n; ++k) {
        if (a[v.at(o, k, i)] > a[v.at(o, best, i)]) best = k;
      }
      out[0][v.at(o, best, i)] = dy[o * v.inner + i];
    }
  }
  return absl::OkStatus();
}

absl::Status KernelSumSquares(absl::Span<const HostTensor* const> in, const AttrMap&,
                              absl::Span<HostTensor> out) {
  const HostTensor& a = *in[0];
  for (int64_t i = 0; i < a.size(); ++i) out[0][0] += a[i] * a[i];
  return absl::OkStatus();
}

absl::Status KernelSoftmax(absl::Span<const HostTensor* const> in, const AttrMap&,
                           absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const int64_t n = x.shape.dim(x.shape.rank() - 1);
  for (int64_t r = 0; r < Rows(x.shape); ++r) {
    const double* row = &x.data[r * n];
    double m = RowMax(row, n);
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(row[j] - m);
    for (int64_t j = 0; j < n; ++j) out[0][r * n + j] = std::exp(row[j] - m) / s;
  }
  return absl::OkStatus();
}

absl::Status KernelLogSoftmax(absl::Span<const HostTensor* const> in, const AttrMap&,
                              absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const int64_t n = x.shape.dim(x.shape.rank() - 1);
  for (int64_t r = 0; r < Rows(x.shape); ++r) {
    const double* row = &x.data[r * n];
    double lse = LogSumExp(row, n);
    for (int64_t j = 0; j < n; ++j) out[0][r * n + j] = row[j] - lse;
  }
  return absl::OkStatus();
}

// dx = y * (dy - sum_last(y * dy)), y the softmax output.
absl::Status KernelSoftmaxGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                               absl::Span<HostTensor> out) {
  const HostTensor& y = *in[0];
  const HostTensor& dy = *in[1];
  const int64_t n = y.shape.dim(y.shape.rank() - 1);
  for (int64_t r = 0; r < Rows(y.shape); ++r) {
    double dot = 0.0;
    for (int64_t j = 0; j < n; ++j) dot += y[r * n + j] * dy[r * n + j];
    for (int64_t j = 0; j < n; ++j) out[0][r * n + j] = y[r * n + j] * (dy[r * n + j] - dot);
  }
  return absl::OkStatus();
}

// dx = dy - exp(y) * sum_last(dy), y the log_softmax output.
absl::Status KernelLogSoftmaxGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                                  absl::Span<HostTensor> out) {
  const HostTensor& y = *in[0];
  const HostTensor& dy = *in[1];
  const int64_t n = y.shape.dim(y.shape.rank() - 1);
  for (int64_t r = 0; r < Rows(y.shape); ++r) {
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) total += dy[r * n + j];
    for (int64_t j = 0; j < n; ++j) {
      out[0][r * n + j] = dy[r * n + j] - std::exp(y[r * n + j]) * total;
    }
  }
  return absl::OkStatus();
}

// ---- gradient rules -----------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// Broadcasts dy, shaped like the reduction of input 0, back to input 0's shape:
// reshape to 1 at each reduced dim, then expand each of them. The last op is named
// `name`; with nothing reduced, dy itself is returned.
absl::StatusOr<TensorId> BroadcastToInput(GradBuilder& b, TensorId dy,
                                          const std::vector<bool>& reduced,
                                          absl::string_view name) {
  const TensorType in = b.input_type(0);
  std::vector<int64_t> ones = in.shape.dims();
  std::vector<int> expand;
  for (int d = 0; d < in.shape.rank(); ++d) {
    if (!reduced[d]) continue;
    ones[d] = 1;
    expand.push_back(d);
  }
  if (expand.empty()) return dy;
  LOOM_ASSIGN_OR_RETURN(TensorId t,
                        b.Emit1(OpKind::kReshape, {dy}, {{"shape", ones}}, "reduce_grad_keep"));
  for (size_t i = 0; i < expand.size(); ++i) {
    int d = expand[i];
    AttrMap attrs{{"dim", int64_t{d}}, {"size", in.shape.dim(d)}};
    LOOM_ASSIGN_OR_RETURN(t, b.Emit1(OpKind::kExpand, {t}, std::move(attrs),
                                     i + 1 == expand.size() ? name : "reduce_grad_expand"));
  }
  return t;
}

Grads GradSum(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(b.input_type(0).shape, b.op().attrs));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, BroadcastToInput(b, dy, reduced, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradMean(GradBuilder& b) {
  const TensorType in = b.input_type(0);
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(in.shape, b.op().attrs));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  if (std::find(reduced.begin(), reduced.end(), true) == reduced.end()) {
    return std::vector<std::optional<TensorId>>{dy};  // a mean over no dims is the identity
  }
  LOOM_ASSIGN_OR_RETURN(TensorId spread, BroadcastToInput(b, dy, reduced, "mean_grad_spread"));
  LOOM_ASSIGN_OR_RETURN(int64_t count, ops::MeanCount(in.shape, b.op().attrs));
  // A reduction over an empty dim leaves no elements to scale; avoid an infinite factor.
  double factor = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kScale, {spread}, {{"factor", factor}},
                                             b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradMax(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, b.op().attrs.GetInt("dim"));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMaxGrad, {b.input(0), dy},
                                             {{"dim", dim}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// d/da sum(a^2) = 2a, times the scalar upstream gradient.
Grads GradSumSquares(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId twice, b.Emit1(OpKind::kScale, {b.input(0)},
                                                {{"factor", 2.0}}, "sum_squares_slope"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kMulScalar, {twice, dy}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// softmax and log_softmax: the gradient op reads the forward output and dy.
template <OpKind kGradKind>
Grads GradFromOutput(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(kGradKind, {b.output(0), dy}, {}, b.GradName(0)));
  return Grads(std::vector<std::optional<TensorId>>(1, dx));
}

}  // namespace

void RegisterReduceOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc, ShardAttrsFn shard_attrs = nullptr) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc, shard_attrs});
  };
  reg(OpKind::kLogSoftmax, InferLastDim, SignatureLastDimFixed, KernelLogSoftmax, Flops<5>,
      GradFromOutput<OpKind::kLogSoftmaxGrad>, "log_softmax(x) over the last dim");
  reg(OpKind::kLogSoftmaxGrad, InferLastDim, SignatureLastDimFixed, KernelLogSoftmaxGrad,
      Flops<10>, nullptr, "log_softmax_grad(y, dy) -> dy - exp(y) * sum_last(dy)")
      .Homogeneous({1}, 1);
  reg(OpKind::kMax, InferMax, SignatureMax, KernelMax, FlopsPerInput<1>, GradMax,
      "max(a) {dim} -> largest value along dim (dim removed; split, partial maxima)");
  reg(OpKind::kMaxGrad, InferMaxGrad, SignatureMaxGrad, KernelMaxGrad, FlopsPerInput<1>,
      nullptr, "max_grad(a, dy) {dim} -> dy at the first argmax along dim, 0 elsewhere")
      .Homogeneous({1}, 1);
  reg(OpKind::kMean, InferMean, SignatureMean, KernelMean, FlopsMean, GradMean,
      "mean(a) {dims, count?} -> the sum of a over dims (dims removed) divided by count "
      "(default: the elements it sums; split, partial sums of the whole op's count)",
      ShardAttrsMean)
      .Homogeneous({0}, 1)
      .Attr("count", AttrRole::kDivisor);
  reg(OpKind::kSoftmax, InferLastDim, SignatureLastDimFixed, KernelSoftmax, Flops<5>,
      GradFromOutput<OpKind::kSoftmaxGrad>, "softmax(x) over the last dim");
  reg(OpKind::kSoftmaxGrad, InferLastDim, SignatureLastDimFixed, KernelSoftmaxGrad,
      Flops<10>, nullptr, "softmax_grad(y, dy) -> y * (dy - sum_last(y * dy))")
      .Homogeneous({1}, 1);
  reg(OpKind::kSum, InferReduce, SignatureSum, KernelSum, FlopsPerInput<1>, GradSum,
      "sum(a) {dims} -> a summed over dims (dims removed)")
      .Linear({{0}});
  reg(OpKind::kSumSquares, InferSumSquares, SignatureSumSquares, KernelSumSquares,
      FlopsPerInput<2>, GradSumSquares, "sum_squares(a) -> scalar sum of a^2");
}

namespace ops {

absl::StatusOr<int64_t> MeanCount(const Shape& input, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced,
                        ReducedDims(input, attrs));
  return MeanDivisor(input, reduced, attrs);
}

}  // namespace ops
}  // namespace loom::ir
