// Mixture-of-experts routing: top-k gating, dispatch, combine.
//
// T tokens, E experts, k experts per token, C slots per expert. Every op that moves
// tokens to or from expert slots uses one slot rule: walk t = 0..T-1 and j = 0..k-1
// in order; the pair (t, j) routed to e = indices[t, j] takes slot count[e] of expert e
// while count[e] < C, and is dropped once the expert is full. The rule depends on all
// tokens at once, so only the feature dim d may be split.

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::ExpectFloat;
using ops::ExpectInteger;
using ops::ExpectRank;
using ops::Like;

// ---- shared rules -----------------------------------------------------------

// The attributes of topk_gate and topk_gate_grad, checked against E experts.
struct GateAttrs {
  int64_t k = 1;
  bool softmax = true;     // score = "softmax" (else "sigmoid")
  bool normalize = false;  // divide the chosen scores by their sum
};

absl::StatusOr<GateAttrs> ParseGateAttrs(const AttrMap& attrs, int64_t experts) {
  GateAttrs g;
  LOOM_ASSIGN_OR_RETURN(g.k, attrs.GetInt("k"));
  if (g.k < 1 || g.k > experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'k' is ", g.k, ", expected 1 to ", experts, " (the experts of input 0)"));
  }
  LOOM_ASSIGN_OR_RETURN(std::string score, attrs.GetString("score", "softmax"));
  if (score != "softmax" && score != "sigmoid") {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'score' is \"", score, "\", expected \"softmax\" or \"sigmoid\""));
  }
  g.softmax = score == "softmax";
  LOOM_ASSIGN_OR_RETURN(int64_t normalize, attrs.GetInt("normalize", 0));
  if (normalize != 0 && normalize != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'normalize' is ", normalize, ", expected 0 or 1"));
  }
  g.normalize = normalize == 1;
  return g;
}

// A positive integer attribute (experts, capacity, tokens).
absl::StatusOr<int64_t> PositiveIntAttr(const AttrMap& attrs, absl::string_view name) {
  LOOM_ASSIGN_OR_RETURN(int64_t v, attrs.GetInt(name));
  if (v < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' is ", v, ", expected at least 1"));
  }
  return v;
}

// Input i has `want` as dim `d` (named `what` in the message).
absl::Status ExpectDim(absl::Span<const TensorType> in, int i, int d, int64_t want,
                       absl::string_view what) {
  if (in[i].shape.dim(d) != want) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].ToString(),
                                                   ", expected dim ", d, " = ", want, " (",
                                                   what, ")"));
  }
  return absl::OkStatus();
}

// Integer [T, k] routing indices at input i.
absl::Status ExpectIndices(absl::Span<const TensorType> in, int i, int64_t tokens) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, i, 2));
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, i));
  return ExpectDim(in, i, 0, tokens, "tokens");
}

// Every entry of [T, k] `indices` is an integer in [0, E).
absl::Status CheckIndices(const HostTensor& indices, int64_t experts) {
  const int64_t k = indices.shape.dim(1);
  for (int64_t p = 0; p < indices.size(); ++p) {
    double v = indices[p];
    if (!(v >= 0 && v < static_cast<double>(experts)) || v != std::floor(v)) {
      return absl::InvalidArgumentError(absl::StrCat("expert index ", v, " at [", p / k, ",",
                                                     p % k, "] is not an integer in [0, ",
                                                     experts, ")"));
    }
  }
  return absl::OkStatus();
}

// Expert e of every (t, j) pair and its slot under the capacity rule, row-major over
// [T, k]; slot -1 marks a dropped pair. Indices outside [0, E) are errors.
struct Routing {
  std::vector<int64_t> expert;
  std::vector<int64_t> slot;
};

absl::StatusOr<Routing> AssignSlots(const HostTensor& indices, int64_t experts,
                                    int64_t capacity) {
  LOOM_RETURN_IF_ERROR(CheckIndices(indices, experts));
  Routing r;
  r.expert.resize(indices.size());
  r.slot.assign(indices.size(), -1);
  std::vector<int64_t> count(experts, 0);
  for (int64_t p = 0; p < indices.size(); ++p) {
    int64_t e = static_cast<int64_t>(indices[p]);
    r.expert[p] = e;
    if (count[e] < capacity) r.slot[p] = count[e]++;
  }
  return r;
}

// Offset of row `slot` of expert `e` in an [E, C, d] tensor.
int64_t SlotOffset(int64_t e, int64_t slot, int64_t capacity, int64_t d) {
  return (e * capacity + slot) * d;
}

// ---- shape rules -------------------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferTopKGate(absl::Span<const TensorType> in,
                                                      const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  const int64_t tokens = in[0].shape.dim(0);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, in[0].shape.dim(1)));
  return std::vector<TensorType>{Like(in[0], {tokens, g.k}),
                                 TensorType{Shape({tokens, g.k}), DType::kI64}};
}

// (logits [T, E], indices [T, k], dweights [T, k]) -> dlogits [T, E].
absl::StatusOr<std::vector<TensorType>> InferTopKGateGrad(absl::Span<const TensorType> in,
                                                          const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  const int64_t tokens = in[0].shape.dim(0);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, in[0].shape.dim(1)));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 1, tokens));
  LOOM_RETURN_IF_ERROR(ExpectDim(in, 1, 1, g.k, "attribute 'k'"));
  LOOM_RETURN_IF_ERROR(ops::ExpectDims(in, 2, {tokens, g.k}));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 2));
  return std::vector<TensorType>{in[0]};
}

// (x [T, d], indices [T, k]) {experts, capacity} -> [E, C, d].
absl::StatusOr<std::vector<TensorType>> InferDispatch(absl::Span<const TensorType> in,
                                                      const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 1, in[0].shape.dim(0)));
  LOOM_ASSIGN_OR_RETURN(int64_t experts, PositiveIntAttr(attrs, "experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, PositiveIntAttr(attrs, "capacity"));
  return std::vector<TensorType>{Like(in[0], {experts, capacity, in[0].shape.dim(1)})};
}

// (dy [E, C, d], indices [T, k]) {experts, capacity, tokens} -> dx [T, d].
absl::StatusOr<std::vector<TensorType>> InferDispatchGrad(absl::Span<const TensorType> in,
                                                          const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 3));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_ASSIGN_OR_RETURN(int64_t experts, PositiveIntAttr(attrs, "experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, PositiveIntAttr(attrs, "capacity"));
  LOOM_ASSIGN_OR_RETURN(int64_t tokens, PositiveIntAttr(attrs, "tokens"));
  LOOM_RETURN_IF_ERROR(ExpectDim(in, 0, 0, experts, "attribute 'experts'"));
  LOOM_RETURN_IF_ERROR(ExpectDim(in, 0, 1, capacity, "attribute 'capacity'"));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 1, tokens));
  return std::vector<TensorType>{Like(in[0], {tokens, in[0].shape.dim(2)})};
}

// Checks (expert_out [E, C, d], weights [T, k], indices [T, k]) at inputs 0..2.
absl::Status CheckCombineInputs(absl::Span<const TensorType> in) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 3));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 2, in[1].shape.dim(0)));
  return ExpectDim(in, 2, 1, in[1].shape.dim(1), "the k of input 1");
}

// (expert_out [E, C, d], weights [T, k], indices [T, k]) -> y [T, d].
absl::StatusOr<std::vector<TensorType>> InferCombine(absl::Span<const TensorType> in,
                                                     const AttrMap&) {
  LOOM_RETURN_IF_ERROR(CheckCombineInputs(in));
  return std::vector<TensorType>{Like(in[0], {in[1].shape.dim(0), in[0].shape.dim(2)})};
}

// (expert_out, weights, indices, dy [T, d]) -> (d_expert_out [E, C, d], d_weights [T, k]).
absl::StatusOr<std::vector<TensorType>> InferCombineGrad(absl::Span<const TensorType> in,
                                                         const AttrMap&) {
  LOOM_RETURN_IF_ERROR(CheckCombineInputs(in));
  LOOM_RETURN_IF_ERROR(ops::ExpectDims(in, 3, {in[1].shape.dim(0), in[0].shape.dim(2)}));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 3));
  return std::vector<TensorType>{in[0], in[1]};
}

// ---- signatures ----------------------------------------------------------------

DimSignature MakeSignature(std::vector<std::vector<std::string>> inputs,
                           std::vector<std::vector<std::string>> outputs,
                           std::vector<std::string> spatial) {
  DimSignature sig;
  sig.inputs = std::move(inputs);
  sig.outputs = std::move(outputs);
  for (const auto& l : spatial) sig.kinds[l] = DimKind::kSpatial;
  for (const auto* side : {&sig.inputs, &sig.outputs}) {
    for (const auto& labels : *side) {
      for (const auto& l : labels) sig.kinds.emplace(l, DimKind::kFixed);
    }
  }
  return sig;
}

absl::StatusOr<DimSignature> SignatureTopKGate(absl::Span<const TensorType>, const AttrMap&) {
  return MakeSignature({{"t", "e"}}, {{"t", "j"}, {"t", "j"}}, {"t"});
}

absl::StatusOr<DimSignature> SignatureTopKGateGrad(absl::Span<const TensorType>,
                                                   const AttrMap&) {
  return MakeSignature({{"t", "e"}, {"t", "j"}, {"t", "j"}}, {{"t", "e"}}, {"t"});
}

absl::StatusOr<DimSignature> SignatureDispatch(absl::Span<const TensorType>, const AttrMap&) {
  return MakeSignature({{"t", "d"}, {"t", "j"}}, {{"e", "c", "d"}}, {"d"});
}

absl::StatusOr<DimSignature> SignatureDispatchGrad(absl::Span<const TensorType>,
                                                   const AttrMap&) {
  return MakeSignature({{"e", "c", "d"}, {"t", "j"}}, {{"t", "d"}}, {"d"});
}

absl::StatusOr<DimSignature> SignatureCombine(absl::Span<const TensorType>, const AttrMap&) {
  return MakeSignature({{"e", "c", "d"}, {"t", "j"}, {"t", "j"}}, {{"t", "d"}}, {"d"});
}

// d is sliced in d_expert_out but summed away in d_weights; no single kind says both,
// so every dim is fixed.
absl::StatusOr<DimSignature> SignatureCombineGrad(absl::Span<const TensorType>,
                                                  const AttrMap&) {
  return MakeSignature({{"e", "c", "d"}, {"t", "j"}, {"t", "j"}, {"t", "d"}},
                       {{"e", "c", "d"}, {"t", "j"}}, {});
}

// ---- FLOPs ------------------------------------------------------------------------

// Scores (about 4 per logit), then the division of the chosen ones.
double FlopsTopKGate(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                     const AttrMap&) {
  return 4.0 * ops::ElementCount(in[0]) + ops::ElementCount(out[0]);
}

double FlopsTopKGateGrad(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                         const AttrMap&) {
  return 8.0 * ops::ElementCount(in[0]) + 4.0 * ops::ElementCount(in[1]);
}

// Pure data movement.
double FlopsZero(absl::Span<const TensorType>, absl::Span<const TensorType>, const AttrMap&) {
  return 0.0;
}

// T*k*d multiply-adds (indices [T, k], y [T, d]).
double FlopsCombine(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                    const AttrMap&) {
  const TensorType& w = in[1];
  return 2.0 * ops::ElementCount(w) * static_cast<double>(in[0].shape.dim(2));
}

// Two products per (t, j, d): one into d_expert_out, one into d_weights.
double FlopsCombineGrad(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                        const AttrMap& attrs) {
  return 2.0 * FlopsCombine(in, out, attrs);
}

// ---- kernels --------------------------------------------------------------------------

// Scores of one row of logits: softmax over the row, or elementwise sigmoid.
std::vector<double> RowScores(const HostTensor& logits, int64_t t, bool softmax) {
  const int64_t experts = logits.shape.dim(1);
  std::vector<double> s(logits.data.begin() + t * experts,
                        logits.data.begin() + (t + 1) * experts);
  if (!softmax) {
    for (double& x : s) x = 1.0 / (1.0 + std::exp(-x));
    return s;
  }
  double max = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - max));
  for (double& x : s) x /= sum;
  return s;
}

absl::Status KernelTopKGate(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                            absl::Span<HostTensor> out) {
  const HostTensor& logits = *in[0];
  const int64_t tokens = logits.shape.dim(0);
  const int64_t experts = logits.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> s = RowScores(logits, t, g.softmax);
    std::vector<int64_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    // Descending score; stable, so ties keep the lower expert index first.
    std::stable_sort(order.begin(), order.end(),
                     [&s](int64_t a, int64_t b) { return s[a] > s[b]; });
    double sum = 0.0;
    for (int64_t j = 0; j < g.k; ++j) sum += s[order[j]];
    for (int64_t j = 0; j < g.k; ++j) {
      double w = s[order[j]];
      out[0][t * g.k + j] = g.normalize ? w / sum : w;
      out[1][t * g.k + j] = static_cast<double>(order[j]);
    }
  }
  return absl::OkStatus();
}

// The selection is held fixed. With w_j = s[i_j] / Z, Z = sum_l s[i_l]:
// ds[i_j] += (dw_j - sum_l dw_l w_l) / Z (just dw_j without normalisation); then
// softmax: dlogit = s * (ds - <ds, s>), sigmoid: dlogit = ds * s * (1 - s).
absl::Status KernelTopKGateGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                absl::Span<HostTensor> out) {
  const HostTensor& logits = *in[0];
  const HostTensor& indices = *in[1];
  const HostTensor& dw = *in[2];
  const int64_t tokens = logits.shape.dim(0);
  const int64_t experts = logits.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, experts));
  LOOM_RETURN_IF_ERROR(CheckIndices(indices, experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> s = RowScores(logits, t, g.softmax);
    const int64_t row = t * g.k;
    double z = 0.0;
    double dot = 0.0;  // sum_l dw_l * s[i_l]
    for (int64_t j = 0; j < g.k; ++j) {
      double chosen = s[static_cast<int64_t>(indices[row + j])];
      z += chosen;
      dot += dw[row + j] * chosen;
    }
    std::vector<double> ds(experts, 0.0);
    for (int64_t j = 0; j < g.k; ++j) {
      int64_t e = static_cast<int64_t>(indices[row + j]);
      ds[e] += g.normalize ? (dw[row + j] - dot / z) / z : dw[row + j];
    }
    double inner = 0.0;
    for (int64_t e = 0; e < experts; ++e) inner += ds[e] * s[e];
    for (int64_t e = 0; e < experts; ++e) {
      out[0][t * experts + e] =
          g.softmax ? s[e] * (ds[e] - inner) : ds[e] * s[e] * (1.0 - s[e]);
    }
  }
  return absl::OkStatus();
}

absl::Status KernelDispatch(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                            absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const int64_t d = x.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(int64_t experts, attrs.GetInt("experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, attrs.GetInt("capacity"));
  LOOM_ASSIGN_OR_RETURN(Routing r, AssignSlots(*in[1], experts, capacity));
  const int64_t k = in[1]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t dst = SlotOffset(r.expert[p], r.slot[p], capacity, d);
    for (int64_t i = 0; i < d; ++i) out[0][dst + i] = x[(p / k) * d + i];
  }
  return absl::OkStatus();
}

absl::Status KernelDispatchGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                                absl::Span<HostTensor> out) {
  const HostTensor& dy = *in[0];
  const int64_t experts = dy.shape.dim(0);
  const int64_t capacity = dy.shape.dim(1);
  const int64_t d = dy.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, AssignSlots(*in[1], experts, capacity));
  const int64_t k = in[1]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t src = SlotOffset(r.expert[p], r.slot[p], capacity, d);
    for (int64_t i = 0; i < d; ++i) out[0][(p / k) * d + i] += dy[src + i];
  }
  return absl::OkStatus();
}

absl::Status KernelCombine(absl::Span<const HostTensor* const> in, const AttrMap&,
                           absl::Span<HostTensor> out) {
  const HostTensor& eo = *in[0];
  const HostTensor& w = *in[1];
  const int64_t experts = eo.shape.dim(0);
  const int64_t capacity = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, AssignSlots(*in[2], experts, capacity));
  const int64_t k = in[2]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t src = SlotOffset(r.expert[p], r.slot[p], capacity, d);
    for (int64_t i = 0; i < d; ++i) out[0][(p / k) * d + i] += w[p] * eo[src + i];
  }
  return absl::OkStatus();
}

absl::Status KernelCombineGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                               absl::Span<HostTensor> out) {
  const HostTensor& eo = *in[0];
  const HostTensor& w = *in[1];
  const HostTensor& dy = *in[3];
  const int64_t experts = eo.shape.dim(0);
  const int64_t capacity = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, AssignSlots(*in[2], experts, capacity));
  const int64_t k = in[2]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t slot = SlotOffset(r.expert[p], r.slot[p], capacity, d);
    int64_t row = (p / k) * d;
    for (int64_t i = 0; i < d; ++i) {
      out[0][slot + i] += w[p] * dy[row + i];
      out[1][p] += eo[slot + i] * dy[row + i];
    }
  }
  return absl::OkStatus();
}

// ---- gradient rules ---------------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

Grads GradTopKGate(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dweights, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dlogits,
                        b.Emit1(OpKind::kTopKGateGrad, {b.input(0), b.output(1), dweights},
                                b.op().attrs, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dlogits};
}

Grads GradDispatch(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(int64_t experts, b.op().attrs.GetInt("experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, b.op().attrs.GetInt("capacity"));
  AttrMap attrs{{"experts", experts},
                {"capacity", capacity},
                {"tokens", b.input_type(0).shape.dim(0)}};
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMoeDispatchGrad, {dy, b.input(1)},
                                             std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx, std::nullopt};
}

Grads GradCombine(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      std::vector<TensorId> d,
      b.Emit(OpKind::kMoeCombineGrad, {b.input(0), b.input(1), b.input(2), dy}, {},
             b.GradName(0)));
  return std::vector<std::optional<TensorId>>{d[0], d[1], std::nullopt};
}

}  // namespace

void RegisterMoeOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc) {
    table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc});
  };
  reg(OpKind::kMoeCombine, InferCombine, SignatureCombine, KernelCombine, FlopsCombine,
      GradCombine,
      "moe_combine(expert_out [E,C,d], weights [T,k], indices [T,k]) -> y [T,d], "
      "sum_j weights * expert_out at each pair's slot");
  reg(OpKind::kMoeCombineGrad, InferCombineGrad, SignatureCombineGrad, KernelCombineGrad,
      FlopsCombineGrad, nullptr,
      "moe_combine_grad(expert_out, weights, indices, dy) -> (d_expert_out, d_weights)");
  reg(OpKind::kMoeDispatch, InferDispatch, SignatureDispatch, KernelDispatch, FlopsZero,
      GradDispatch,
      "moe_dispatch(x [T,d], indices [T,k]) {experts, capacity} -> [E,C,d], "
      "token rows in expert slots, overflow dropped");
  reg(OpKind::kMoeDispatchGrad, InferDispatchGrad, SignatureDispatchGrad, KernelDispatchGrad,
      FlopsZero, nullptr,
      "moe_dispatch_grad(dy [E,C,d], indices [T,k]) {experts, capacity, tokens} -> dx [T,d]");
  reg(OpKind::kTopKGate, InferTopKGate, SignatureTopKGate, KernelTopKGate, FlopsTopKGate,
      GradTopKGate,
      "topk_gate(logits [T,E]) {k, score=\"softmax\" or \"sigmoid\", normalize=0 or 1} -> "
      "(weights [T,k], indices i64 [T,k]), k best scores");
  reg(OpKind::kTopKGateGrad, InferTopKGateGrad, SignatureTopKGateGrad, KernelTopKGateGrad,
      FlopsTopKGateGrad, nullptr,
      "topk_gate_grad(logits, indices, dweights) {k, score, normalize} -> dlogits");
}

}  // namespace loom::ir
