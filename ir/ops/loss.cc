// Losses and the pieces of a vocabulary-split loss. The loss divides by an explicit
// token count, so its token dims split into partial sums. pick reads one logit per
// position: split along the vocabulary, each piece holds the logit when the target falls
// in its range and zero otherwise, so the pieces are partial sums.

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/ops/reduce_util.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::DefaultSpatial;
using ops::DimLabels;
using ops::ExpectDims;
using ops::ExpectFloat;
using ops::ExpectInteger;
using ops::ExpectMinRank;
using ops::ExpectScalar;
using ops::Flops;
using ops::FlopsPerInput;
using ops::Like;
using ops::LogSumExp;
using ops::Rows;

// ---- helpers -------------------------------------------------------------------

// "[1,2]": the multi-index of flat element `flat` of `shape`.
std::string Position(const Shape& shape, int64_t flat) {
  std::vector<int64_t> coord(shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    coord[d] = flat % shape.dim(d);
    flat /= shape.dim(d);
  }
  return absl::StrCat("[", absl::StrJoin(coord, ","), "]");
}

// The class index of target `r`, checked against the vocabulary size `v`.
absl::StatusOr<int64_t> Target(const HostTensor& targets, int64_t r, int64_t v) {
  double t = targets[r];
  if (!(t >= 0 && t < static_cast<double>(v) && t == std::floor(t))) {
    return absl::InvalidArgumentError(absl::StrCat("target ", t, " at position ",
                                                   Position(targets.shape, r),
                                                   " is outside the vocabulary [0, ", v, ")"));
  }
  return static_cast<int64_t>(t);
}

// ---- shape rules ----------------------------------------------------------------

// The optional `vocab_begin` attribute: the vocabulary index of a piece's first entry.
absl::StatusOr<std::optional<int64_t>> VocabBegin(const AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return std::optional<int64_t>();
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("vocab_begin"));
  if (begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab_begin' is ", begin, ", expected at least 0"));
  }
  return std::optional<int64_t>(begin);
}

// pick(x [..., V] float, targets [...] integer) {vocab_begin?} -> [...].
absl::StatusOr<std::vector<TensorType>> InferPick(absl::Span<const TensorType> in,
                                                  const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 1));
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, 1));
  const std::vector<int64_t>& dims = in[0].shape.dims();
  std::vector<int64_t> lead(dims.begin(), dims.end() - 1);
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 1, lead));
  LOOM_RETURN_IF_ERROR(VocabBegin(attrs).status());
  return std::vector<TensorType>{Like(in[0], std::move(lead))};
}

// pick_grad(targets [...] integer, dy [...] float) {vocab, vocab_begin?} -> [..., vocab].
absl::StatusOr<std::vector<TensorType>> InferPickGrad(absl::Span<const TensorType> in,
                                                      const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 1, in[0].shape.dims()));
  LOOM_ASSIGN_OR_RETURN(int64_t vocab, attrs.GetInt("vocab"));
  if (vocab < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab' is ", vocab, ", expected at least 1"));
  }
  LOOM_RETURN_IF_ERROR(VocabBegin(attrs).status());
  std::vector<int64_t> dims = in[0].shape.dims();
  dims.push_back(vocab);
  return std::vector<TensorType>{Like(in[1], std::move(dims))};
}

// logits [..., V] float and targets [...] integer with the same leading dims.
absl::Status CheckLogitsAndTargets(absl::Span<const TensorType> in) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 1));
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, 1));
  const std::vector<int64_t>& dims = in[0].shape.dims();
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 1, std::vector<int64_t>(dims.begin(), dims.end() - 1)));
  if (in[1].shape.num_elements() == 0) {
    return absl::InvalidArgumentError(
        "input 1 has no elements; the mean loss needs at least one position");
  }
  return absl::OkStatus();
}

// The optional `count` attribute of the loss: the number of positions it averages
// over. Default: the positions of `logits` (every dim but the last).
absl::StatusOr<int64_t> TokenCount(const Shape& logits, const AttrMap& attrs) {
  if (!attrs.Has("count")) return Rows(logits);
  LOOM_ASSIGN_OR_RETURN(int64_t count, attrs.GetInt("count"));
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'count' is ", count, ", expected at least 1"));
  }
  return count;
}

absl::StatusOr<std::vector<TensorType>> InferCrossEntropy(absl::Span<const TensorType> in,
                                                          const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckLogitsAndTargets(in));
  LOOM_RETURN_IF_ERROR(TokenCount(in[0].shape, attrs).status());
  return std::vector<TensorType>{Like(in[0], {})};
}

// cross_entropy_grad(logits, targets, dloss) -> dlogits.
absl::StatusOr<std::vector<TensorType>> InferCrossEntropyGrad(absl::Span<const TensorType> in,
                                                              const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckLogitsAndTargets(in));
  LOOM_RETURN_IF_ERROR(TokenCount(in[0].shape, attrs).status());
  LOOM_RETURN_IF_ERROR(ExpectScalar(in, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 2));
  return std::vector<TensorType>{in[0]};
}

// ---- signatures -----------------------------------------------------------------

// Losses: the vocab label is fixed (a row's logsumexp needs the whole row). The token
// labels split exactly because a piece divides by the global `count` (set by
// ShardAttrsCrossEntropy): the loss over a token range is a partial sum of the mean
// (token labels reduce), its gradient a slice of the full gradient (token labels
// are spatial).
DimSignature CrossEntropySignature(int rank, bool grad) {
  std::vector<std::string> labels = DimLabels(rank);
  DimSignature sig;
  sig.inputs = {labels, std::vector<std::string>(labels.begin(), labels.end() - 1)};
  if (grad) sig.inputs.push_back({});  // dloss, a scalar
  sig.outputs = {grad ? labels : std::vector<std::string>{}};
  for (int d = 0; d + 1 < rank; ++d) {
    sig.kinds[labels[d]] = grad ? DimKind::kSpatial : DimKind::kReduction;
  }
  sig.kinds[labels.back()] = DimKind::kFixed;
  return sig;
}

absl::StatusOr<DimSignature> SignatureCrossEntropy(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  return CrossEntropySignature(in[0].shape.rank(), /*grad=*/false);
}

absl::StatusOr<DimSignature> SignatureCrossEntropyGrad(absl::Span<const TensorType> in,
                                                       const AttrMap&) {
  return CrossEntropySignature(in[0].shape.rank(), /*grad=*/true);
}

// pick(x, targets) -> y: "d0 .. v, d0 .. -> d0 .." with v a reduction label (a
// vocabulary piece holds the picked logit or zero, a partial sum of the whole pick).
absl::StatusOr<DimSignature> SignaturePick(absl::Span<const TensorType> in, const AttrMap&) {
  const int rank = in[0].shape.rank();
  std::vector<std::string> lead = DimLabels(rank - 1);
  DimSignature sig;
  std::vector<std::string> x = lead;
  x.push_back("v");
  sig.inputs = {x, lead};
  sig.outputs = {lead};
  sig.kinds["v"] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// pick_grad(targets, dy) -> dx: "d0 .., d0 .. -> d0 .. v", every label spatial; v
// appears only in the output (a piece writes its vocabulary range).
absl::StatusOr<DimSignature> SignaturePickGrad(absl::Span<const TensorType> in,
                                               const AttrMap&) {
  std::vector<std::string> lead = DimLabels(in[0].shape.rank());
  DimSignature sig;
  std::vector<std::string> dx = lead;
  dx.push_back("v");
  sig.inputs = {lead, lead};
  sig.outputs = {dx};
  DefaultSpatial(sig);
  return sig;
}

// ---- kernels ------------------------------------------------------------------------

// Sum over positions of logsumexp(logits) - logits[target], divided by `count`.
absl::Status KernelCrossEntropy(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                absl::Span<HostTensor> out) {
  const HostTensor& logits = *in[0];
  const HostTensor& targets = *in[1];
  const int64_t v = logits.shape.dim(logits.shape.rank() - 1);
  double total = 0.0;
  for (int64_t r = 0; r < targets.size(); ++r) {
    LOOM_ASSIGN_OR_RETURN(int64_t t, Target(targets, r, v));
    const double* row = &logits.data[r * v];
    total += LogSumExp(row, v) - row[t];
  }
  LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(logits.shape, attrs));
  out[0][0] = total / static_cast<double>(count);
  return absl::OkStatus();
}

// dlogits = (softmax(logits) - onehot(target)) * dloss / count.
absl::Status KernelCrossEntropyGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                    absl::Span<HostTensor> out) {
  const HostTensor& logits = *in[0];
  const HostTensor& targets = *in[1];
  LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(logits.shape, attrs));
  const double scale = (*in[2])[0] / static_cast<double>(count);
  const int64_t v = logits.shape.dim(logits.shape.rank() - 1);
  for (int64_t r = 0; r < targets.size(); ++r) {
    LOOM_ASSIGN_OR_RETURN(int64_t t, Target(targets, r, v));
    const double* row = &logits.data[r * v];
    double lse = LogSumExp(row, v);
    for (int64_t j = 0; j < v; ++j) {
      double p = std::exp(row[j] - lse);
      out[0][r * v + j] = (p - (j == t ? 1.0 : 0.0)) * scale;
    }
  }
  return absl::OkStatus();
}

// x[..., target - vocab_begin] when the target falls in this piece's vocabulary range,
// 0 otherwise. Without `vocab_begin` the op holds the whole vocabulary and a target
// outside it is an error.
absl::Status KernelPick(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                        absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const HostTensor& targets = *in[1];
  const int64_t v = x.shape.dim(x.shape.rank() - 1);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> begin, VocabBegin(attrs));
  for (int64_t r = 0; r < targets.size(); ++r) {
    if (!begin.has_value()) {
      LOOM_ASSIGN_OR_RETURN(int64_t t, Target(targets, r, v));
      out[0][r] = x[r * v + t];
      continue;
    }
    const double local = targets[r] - static_cast<double>(*begin);
    if (local >= 0 && local < static_cast<double>(v)) {
      out[0][r] = x[r * v + static_cast<int64_t>(local)];
    }
  }
  return absl::OkStatus();
}

// dx[..., target - vocab_begin] = dy[...] when in range, 0 elsewhere.
absl::Status KernelPickGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                            absl::Span<HostTensor> out) {
  const HostTensor& targets = *in[0];
  const HostTensor& dy = *in[1];
  LOOM_ASSIGN_OR_RETURN(int64_t v, attrs.GetInt("vocab"));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> begin, VocabBegin(attrs));
  for (int64_t r = 0; r < targets.size(); ++r) {
    if (!begin.has_value()) {
      LOOM_ASSIGN_OR_RETURN(int64_t t, Target(targets, r, v));
      out[0][r * v + t] = dy[r];
      continue;
    }
    const double local = targets[r] - static_cast<double>(*begin);
    if (local >= 0 && local < static_cast<double>(v)) {
      out[0][r * v + static_cast<int64_t>(local)] = dy[r];
    }
  }
  return absl::OkStatus();
}

// ---- pieces -------------------------------------------------------------------------

// A piece over a range of positions divides by the logical op's count: `count` is
// the op's own count, or the positions of the logical logits when it has none.
absl::StatusOr<AttrMap> ShardAttrsCrossEntropy(const AttrMap& attrs,
                                               absl::Span<const TensorType> in,
                                               absl::Span<const Box>, absl::Span<const TensorType>,
                                               absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(in[0].shape, attrs));
  AttrMap piece = attrs;
  piece.Set("count", count);
  return piece;
}

// The piece's offset along the vocabulary: (existing vocab_begin or 0) + box begin.
absl::StatusOr<int64_t> PieceVocabBegin(const AttrMap& attrs, const Interval& vocab_range) {
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> begin, VocabBegin(attrs));
  return begin.value_or(0) + vocab_range.begin;
}

// A piece of pick reading part of the vocabulary sets `vocab_begin` to where its
// part starts; a piece holding the whole vocabulary keeps the op's attributes.
absl::StatusOr<AttrMap> ShardAttrsPick(const AttrMap& attrs, absl::Span<const TensorType> in,
                                       absl::Span<const Box> in_boxes,
                                       absl::Span<const TensorType>, absl::Span<const Box>) {
  const int rank = in[0].shape.rank();
  if (in_boxes.empty() || static_cast<int>(in_boxes[0].size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("pick piece needs an input 0 box of ", rank, " dims"));
  }
  const Interval& range = in_boxes[0][rank - 1];
  if (range.begin == 0 && range.end == in[0].shape.dim(rank - 1)) return attrs;
  LOOM_ASSIGN_OR_RETURN(int64_t begin, PieceVocabBegin(attrs, range));
  AttrMap piece = attrs;
  piece.Set("vocab_begin", begin);
  return piece;
}

// A piece of pick_grad writes a vocabulary range: `vocab` becomes its extent and
// `vocab_begin` where it starts.
absl::StatusOr<AttrMap> ShardAttrsPickGrad(const AttrMap& attrs, absl::Span<const TensorType>,
                                           absl::Span<const Box>,
                                           absl::Span<const TensorType> out,
                                           absl::Span<const Box> out_boxes) {
  const int rank = out[0].shape.rank();
  if (out_boxes.size() != 1 || static_cast<int>(out_boxes[0].size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("pick_grad piece needs one output box of ", rank, " dims"));
  }
  const Interval& range = out_boxes[0][rank - 1];
  LOOM_ASSIGN_OR_RETURN(int64_t begin, PieceVocabBegin(attrs, range));
  AttrMap piece = attrs;
  piece.Set("vocab", range.end - range.begin);
  piece.Set("vocab_begin", begin);
  return piece;
}

// ---- gradient rules -----------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// The gradient divides by the same count as the loss.
Grads GradCrossEntropy(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dloss, b.GradOutputOrZeros(0));
  AttrMap attrs;
  if (b.op().attrs.Has("count")) {
    LOOM_ASSIGN_OR_RETURN(int64_t count, b.op().attrs.GetInt("count"));
    attrs.Set("count", count);
  }
  LOOM_ASSIGN_OR_RETURN(TensorId dlogits,
                        b.Emit1(OpKind::kCrossEntropyGrad, {b.input(0), b.input(1), dloss},
                                std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dlogits, std::nullopt};
}

// dx = pick_grad(targets, dy) over x's vocabulary (and offset); targets get none.
Grads GradPick(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  const Shape x = b.input_type(0).shape;
  AttrMap attrs{{"vocab", x.dim(x.rank() - 1)}};
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> begin, VocabBegin(b.op().attrs));
  if (begin.has_value()) attrs.Set("vocab_begin", *begin);
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kPickGrad, {b.input(1), dy},
                                             std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx, std::nullopt};
}

}  // namespace

void RegisterLossOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc, ShardAttrsFn shard_attrs = nullptr) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc, shard_attrs});
  };
  reg(OpKind::kCrossEntropy, InferCrossEntropy, SignatureCrossEntropy, KernelCrossEntropy,
      FlopsPerInput<6>, GradCrossEntropy,
      "cross_entropy(logits [..., V], targets [...] int) {count?} -> sum of "
      "-log_softmax[target] / count (default: the number of positions, i.e. the mean)",
      ShardAttrsCrossEntropy)
      .Attr("count", AttrRole::kDivisor);
  reg(OpKind::kCrossEntropyGrad, InferCrossEntropyGrad, SignatureCrossEntropyGrad,
      KernelCrossEntropyGrad, Flops<12>, nullptr,
      "cross_entropy_grad(logits, targets, dloss) {count?} -> (softmax - onehot) * dloss / count",
      ShardAttrsCrossEntropy)
      .Homogeneous({2}, 1)
      .Attr("count", AttrRole::kDivisor);
  reg(OpKind::kPick, InferPick, SignaturePick, KernelPick, Flops<0>, GradPick,
      "pick(x [..., V], targets [...] int) {vocab_begin?} -> x[..., target - vocab_begin] "
      "when in [0, V), else 0 (without vocab_begin a target outside [0, V) is an error)",
      ShardAttrsPick)
      .Homogeneous({0}, 1)
      .Attr("vocab_begin", AttrRole::kOffset);
  reg(OpKind::kPickGrad, InferPickGrad, SignaturePickGrad, KernelPickGrad, Flops<0>, nullptr,
      "pick_grad(targets [...] int, dy [...]) {vocab, vocab_begin?} -> [..., vocab]: dy at "
      "target - vocab_begin when in range, 0 elsewhere",
      ShardAttrsPickGrad)
      .Homogeneous({1}, 1)
      .Attr("vocab_begin", AttrRole::kOffset)
      .Resizes(ops::ResizeVocab);
}

}  // namespace loom::ir
