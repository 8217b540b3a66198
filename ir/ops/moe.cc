// Mixture-of-experts routing: top-k gating, dispatch, combine.
//
// T tokens in G contiguous groups of T/G (attribute `groups`, default 1), E experts,
// k experts per token, C slots per expert in each group. Every op that moves tokens
// to or from expert slots uses one slot rule, run in each group on its own: walk the
// group's tokens t and j = 0..k-1 in order; the pair (t, j) routed to e = indices[t, j]
// takes the group's next slot s of expert e while s < C, and is dropped once the
// group's C slots of e are taken. Expert tensors are [E, G*C, d]: slot s of expert e in
// group g is row [e, g*C + s]. A group's slots depend on its own tokens only, so the
// token dim t and the slot dim c split together (coupled) into pieces of whole groups;
// a piece runs the op with `groups` set to the groups it holds (see the shard rules).
// The expert dim e stays whole: expert parallelism moves the [E, G*C, d] tensors
// between devices (all-to-all) around the routing ops.

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

// Attribute `groups` (default 1), at least 1.
absl::StatusOr<int64_t> GroupsAttr(const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t groups, attrs.GetInt("groups", 1));
  if (groups < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'groups' is ", groups, ", expected at least 1"));
  }
  return groups;
}

// `groups` divides dim `d` of input i (named `what` in the message).
absl::Status ExpectGroupsDivide(absl::Span<const TensorType> in, int i, int d, int64_t groups,
                                absl::string_view what) {
  if (in[i].shape.dim(d) % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'groups' is ", groups, ", which does not divide dim ", d, " (", what,
        ") = ", in[i].shape.dim(d), " of input ", i, " ", in[i].ToString()));
  }
  return absl::OkStatus();
}

// Expert e of every (t, j) pair and its slot column in [0, G*C) under the grouped
// capacity rule, row-major over [T, k]; column -1 marks a dropped pair. Indices
// outside [0, E) are errors.
struct Routing {
  std::vector<int64_t> expert;
  std::vector<int64_t> slot;
};

absl::StatusOr<Routing> AssignSlots(const HostTensor& indices, int64_t experts,
                                    int64_t capacity, int64_t groups) {
  LOOM_RETURN_IF_ERROR(CheckIndices(indices, experts));
  const int64_t k = indices.shape.dim(1);
  const int64_t group_pairs = indices.shape.dim(0) / groups * k;
  Routing r;
  r.expert.resize(indices.size());
  r.slot.assign(indices.size(), -1);
  std::vector<int64_t> count;
  for (int64_t p = 0; p < indices.size(); ++p) {
    if (p % group_pairs == 0) count.assign(experts, 0);  // a new group starts
    int64_t e = static_cast<int64_t>(indices[p]);
    r.expert[p] = e;
    if (count[e] < capacity) r.slot[p] = (p / group_pairs) * capacity + count[e]++;
  }
  return r;
}

// The routing of a kernel whose expert tensor `slots` is [E, G*C, d].
absl::StatusOr<Routing> RouteInto(const HostTensor& slots, const HostTensor& indices,
                                  const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
  return AssignSlots(indices, slots.shape.dim(0), slots.shape.dim(1) / groups, groups);
}

// Offset of slot column `slot` of expert e in an [E, columns, d] tensor.
int64_t SlotOffset(int64_t e, int64_t slot, int64_t columns, int64_t d) {
  return (e * columns + slot) * d;
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

// (x [T, d], indices [T, k]) {experts, capacity, groups} -> [E, G*C, d].
absl::StatusOr<std::vector<TensorType>> InferDispatch(absl::Span<const TensorType> in,
                                                      const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 1, in[0].shape.dim(0)));
  LOOM_ASSIGN_OR_RETURN(int64_t experts, PositiveIntAttr(attrs, "experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, PositiveIntAttr(attrs, "capacity"));
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
  LOOM_RETURN_IF_ERROR(ExpectGroupsDivide(in, 0, 0, groups, "tokens"));
  return std::vector<TensorType>{
      Like(in[0], {experts, groups * capacity, in[0].shape.dim(1)})};
}

// (dy [E, G*C, d], indices [T, k]) {experts, capacity, tokens, groups} -> dx [T, d].
absl::StatusOr<std::vector<TensorType>> InferDispatchGrad(absl::Span<const TensorType> in,
                                                          const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 3));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_ASSIGN_OR_RETURN(int64_t experts, PositiveIntAttr(attrs, "experts"));
  LOOM_ASSIGN_OR_RETURN(int64_t capacity, PositiveIntAttr(attrs, "capacity"));
  LOOM_ASSIGN_OR_RETURN(int64_t tokens, PositiveIntAttr(attrs, "tokens"));
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
  LOOM_RETURN_IF_ERROR(ExpectDim(in, 0, 0, experts, "attribute 'experts'"));
  LOOM_RETURN_IF_ERROR(
      ExpectDim(in, 0, 1, groups * capacity, "attribute 'groups' times 'capacity'"));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 1, tokens));
  LOOM_RETURN_IF_ERROR(ExpectGroupsDivide(in, 1, 0, groups, "tokens"));
  return std::vector<TensorType>{Like(in[0], {tokens, in[0].shape.dim(2)})};
}

// Checks (expert_out [E, G*C, d], weights [T, k], indices [T, k]) {groups} at inputs 0..2.
absl::Status CheckCombineInputs(absl::Span<const TensorType> in, const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 3));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, 2));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectIndices(in, 2, in[1].shape.dim(0)));
  LOOM_RETURN_IF_ERROR(ExpectDim(in, 2, 1, in[1].shape.dim(1), "the k of input 1"));
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
  LOOM_RETURN_IF_ERROR(ExpectGroupsDivide(in, 0, 1, groups, "slots"));
  return ExpectGroupsDivide(in, 1, 0, groups, "tokens");
}

// (expert_out [E, G*C, d], weights [T, k], indices [T, k]) {groups} -> y [T, d].
absl::StatusOr<std::vector<TensorType>> InferCombine(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckCombineInputs(in, attrs));
  return std::vector<TensorType>{Like(in[0], {in[1].shape.dim(0), in[0].shape.dim(2)})};
}

// (expert_out, weights, indices, dy [T, d]) {groups} -> (d_expert_out [E, G*C, d],
// d_weights [T, k]).
absl::StatusOr<std::vector<TensorType>> InferCombineGrad(absl::Span<const TensorType> in,
                                                         const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CheckCombineInputs(in, attrs));
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

// Tokens t and slot columns c split together: n pieces of both hold the same whole
// groups when n divides G (the shard rules reject a piece that cuts a group).
DimSignature GroupedSignature(std::vector<std::vector<std::string>> inputs,
                              std::vector<std::vector<std::string>> outputs,
                              std::vector<std::string> spatial) {
  spatial.push_back("t");
  spatial.push_back("c");
  DimSignature sig = MakeSignature(std::move(inputs), std::move(outputs), std::move(spatial));
  sig.coupled = {{"t", "c"}};
  return sig;
}

absl::StatusOr<DimSignature> SignatureDispatch(absl::Span<const TensorType>, const AttrMap&) {
  return GroupedSignature({{"t", "d"}, {"t", "j"}}, {{"e", "c", "d"}}, {"d"});
}

absl::StatusOr<DimSignature> SignatureDispatchGrad(absl::Span<const TensorType>,
                                                   const AttrMap&) {
  return GroupedSignature({{"e", "c", "d"}, {"t", "j"}}, {{"t", "d"}}, {"d"});
}

absl::StatusOr<DimSignature> SignatureCombine(absl::Span<const TensorType>, const AttrMap&) {
  return GroupedSignature({{"e", "c", "d"}, {"t", "j"}, {"t", "j"}}, {{"t", "d"}}, {"d"});
}

// d is sliced in d_expert_out but summed away in d_weights; no single kind says both,
// so d is fixed.
absl::StatusOr<DimSignature> SignatureCombineGrad(absl::Span<const TensorType>,
                                                  const AttrMap&) {
  return GroupedSignature({{"e", "c", "d"}, {"t", "j"}, {"t", "j"}, {"t", "d"}},
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
  const int64_t columns = out[0].shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(Routing r, RouteInto(out[0], *in[1], attrs));
  const int64_t k = in[1]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t dst = SlotOffset(r.expert[p], r.slot[p], columns, d);
    for (int64_t i = 0; i < d; ++i) out[0][dst + i] = x[(p / k) * d + i];
  }
  return absl::OkStatus();
}

absl::Status KernelDispatchGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                absl::Span<HostTensor> out) {
  const HostTensor& dy = *in[0];
  const int64_t columns = dy.shape.dim(1);
  const int64_t d = dy.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, RouteInto(dy, *in[1], attrs));
  const int64_t k = in[1]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t src = SlotOffset(r.expert[p], r.slot[p], columns, d);
    for (int64_t i = 0; i < d; ++i) out[0][(p / k) * d + i] += dy[src + i];
  }
  return absl::OkStatus();
}

absl::Status KernelCombine(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                           absl::Span<HostTensor> out) {
  const HostTensor& eo = *in[0];
  const HostTensor& w = *in[1];
  const int64_t columns = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, RouteInto(eo, *in[2], attrs));
  const int64_t k = in[2]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t src = SlotOffset(r.expert[p], r.slot[p], columns, d);
    for (int64_t i = 0; i < d; ++i) out[0][(p / k) * d + i] += w[p] * eo[src + i];
  }
  return absl::OkStatus();
}

absl::Status KernelCombineGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                               absl::Span<HostTensor> out) {
  const HostTensor& eo = *in[0];
  const HostTensor& w = *in[1];
  const HostTensor& dy = *in[3];
  const int64_t columns = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, RouteInto(eo, *in[2], attrs));
  const int64_t k = in[2]->shape.dim(1);
  for (int64_t p = 0; p < static_cast<int64_t>(r.slot.size()); ++p) {
    if (r.slot[p] < 0) continue;
    int64_t slot = SlotOffset(r.expert[p], r.slot[p], columns, d);
    int64_t row = (p / k) * d;
    for (int64_t i = 0; i < d; ++i) {
      out[0][slot + i] += w[p] * dy[row + i];
      out[1][p] += eo[slot + i] * dy[row + i];
    }
  }
  return absl::OkStatus();
}

// ---- pieces ---------------------------------------------------------------------------

// Interval `dim` of box `i` of `boxes`, which must have `rank` dims.
absl::StatusOr<Interval> BoxInterval(absl::Span<const Box> boxes, int i, int rank, int dim,
                                     absl::string_view what) {
  if (static_cast<int>(boxes.size()) <= i || static_cast<int>(boxes[i].size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing piece needs a ", rank, "-dim box for ", what, " ", i));
  }
  return boxes[i][dim];
}

// The groups of a piece over tokens `rows` of `tokens` and slot columns `cols` of
// `columns` (= G*C): the rows must be whole groups and the columns their slots.
absl::StatusOr<int64_t> PieceGroups(int64_t groups, int64_t tokens, Interval rows,
                                    int64_t columns, Interval cols) {
  if (tokens % groups != 0 || columns % groups != 0 || tokens < groups) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'groups' is ", groups,
                                                   ", which does not divide ", tokens,
                                                   " tokens and ", columns, " slot columns"));
  }
  const int64_t group_tokens = tokens / groups;
  const int64_t capacity = columns / groups;
  if (rows.size() <= 0 || rows.begin % group_tokens != 0 || rows.end % group_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a routing piece over tokens [", rows.begin, ":", rows.end, ") of ", tokens,
        " does not hold whole groups of ", group_tokens, " tokens (attribute 'groups' = ",
        groups, ")"));
  }
  const Interval want{rows.begin / group_tokens * capacity, rows.end / group_tokens * capacity};
  if (!(cols == want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a routing piece over tokens [", rows.begin, ":", rows.end, ") holds slot columns [",
        cols.begin, ":", cols.end, "), expected [", want.begin, ":", want.end,
        ") (the slots of its groups)"));
  }
  return rows.size() / group_tokens;
}

// `attrs` with `groups` set to the piece's groups (unchanged for a whole op).
absl::StatusOr<AttrMap> WithPieceGroups(const AttrMap& attrs, int64_t tokens, Interval rows,
                                        int64_t columns, Interval cols) {
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
  LOOM_ASSIGN_OR_RETURN(int64_t local, PieceGroups(groups, tokens, rows, columns, cols));
  if (local == groups) return attrs;
  AttrMap piece = attrs;
  piece.Set("groups", local);
  return piece;
}

// dispatch: tokens from x (input 0), slot columns from the output.
absl::StatusOr<AttrMap> ShardAttrsDispatch(const AttrMap& attrs, absl::Span<const TensorType> in,
                                           absl::Span<const Box> in_boxes,
                                           absl::Span<const TensorType> out,
                                           absl::Span<const Box> out_boxes) {
  LOOM_ASSIGN_OR_RETURN(Interval rows, BoxInterval(in_boxes, 0, 2, 0, "input"));
  LOOM_ASSIGN_OR_RETURN(Interval cols, BoxInterval(out_boxes, 0, 3, 1, "output"));
  return WithPieceGroups(attrs, in[0].shape.dim(0), rows, out[0].shape.dim(1), cols);
}

// dispatch_grad: tokens from dx (the output), slot columns from dy; `tokens` becomes
// the piece's tokens.
absl::StatusOr<AttrMap> ShardAttrsDispatchGrad(const AttrMap& attrs,
                                               absl::Span<const TensorType> in,
                                               absl::Span<const Box> in_boxes,
                                               absl::Span<const TensorType> out,
                                               absl::Span<const Box> out_boxes) {
  LOOM_ASSIGN_OR_RETURN(Interval rows, BoxInterval(out_boxes, 0, 2, 0, "output"));
  LOOM_ASSIGN_OR_RETURN(Interval cols, BoxInterval(in_boxes, 0, 3, 1, "input"));
  LOOM_ASSIGN_OR_RETURN(AttrMap piece, WithPieceGroups(attrs, out[0].shape.dim(0), rows,
                                                       in[0].shape.dim(1), cols));
  piece.Set("tokens", rows.size());
  return piece;
}

// combine and combine_grad: tokens from the weights (input 1), slot columns from
// expert_out (input 0).
absl::StatusOr<AttrMap> ShardAttrsCombine(const AttrMap& attrs, absl::Span<const TensorType> in,
                                          absl::Span<const Box> in_boxes,
                                          absl::Span<const TensorType>, absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(Interval rows, BoxInterval(in_boxes, 1, 2, 0, "input"));
  LOOM_ASSIGN_OR_RETURN(Interval cols, BoxInterval(in_boxes, 0, 3, 1, "input"));
  return WithPieceGroups(attrs, in[1].shape.dim(0), rows, in[0].shape.dim(1), cols);
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
  LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(b.op().attrs));
  AttrMap attrs{{"experts", experts},
                {"capacity", capacity},
                {"groups", groups},
                {"tokens", b.input_type(0).shape.dim(0)}};
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMoeDispatchGrad, {dy, b.input(1)},
                                             std::move(attrs), b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx, std::nullopt};
}

// combine_grad takes combine's attributes (its `groups`).
Grads GradCombine(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      std::vector<TensorId> d,
      b.Emit(OpKind::kMoeCombineGrad, {b.input(0), b.input(1), b.input(2), dy}, b.op().attrs,
             b.GradName(0)));
  return std::vector<std::optional<TensorId>>{d[0], d[1], std::nullopt};
}

}  // namespace

void RegisterMoeOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc, ShardAttrsFn shard_attrs = nullptr) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc, shard_attrs});
  };
  reg(OpKind::kMoeCombine, InferCombine, SignatureCombine, KernelCombine, FlopsCombine,
      GradCombine,
      "moe_combine(expert_out [E,G*C,d], weights [T,k], indices [T,k]) {groups=1} -> y [T,d], "
      "sum_j weights * expert_out at each pair's slot",
      ShardAttrsCombine)
      .Homogeneous({0}, 1)
      .Homogeneous({1}, 1)
      .RoutesTokens();
  reg(OpKind::kMoeCombineGrad, InferCombineGrad, SignatureCombineGrad, KernelCombineGrad,
      FlopsCombineGrad, nullptr,
      "moe_combine_grad(expert_out, weights, indices, dy) {groups=1} -> "
      "(d_expert_out, d_weights)",
      ShardAttrsCombine)
      .Homogeneous({3}, 1)
      .RoutesTokens();
  reg(OpKind::kMoeDispatch, InferDispatch, SignatureDispatch, KernelDispatch, FlopsZero,
      GradDispatch,
      "moe_dispatch(x [T,d], indices [T,k]) {experts, capacity, groups=1} -> [E,G*C,d], "
      "token rows in expert slots per group of T/G tokens, overflow dropped",
      ShardAttrsDispatch)
      .Homogeneous({0}, 1)
      .RoutesTokens();
  reg(OpKind::kMoeDispatchGrad, InferDispatchGrad, SignatureDispatchGrad, KernelDispatchGrad,
      FlopsZero, nullptr,
      "moe_dispatch_grad(dy [E,G*C,d], indices [T,k]) {experts, capacity, tokens, groups=1} "
      "-> dx [T,d]",
      ShardAttrsDispatchGrad)
      .Homogeneous({0}, 1)
      .RoutesTokens();
  reg(OpKind::kTopKGate, InferTopKGate, SignatureTopKGate, KernelTopKGate, FlopsTopKGate,
      GradTopKGate,
      "topk_gate(logits [T,E]) {k, score=\"softmax\" or \"sigmoid\", normalize=0 or 1} -> "
      "(weights [T,k], indices i64 [T,k]), k best scores");
  reg(OpKind::kTopKGateGrad, InferTopKGateGrad, SignatureTopKGateGrad, KernelTopKGateGrad,
      FlopsTopKGateGrad, nullptr,
      "topk_gate_grad(logits, indices, dweights) {k, score, normalize} -> dlogits")
      .Homogeneous({2}, 1);
}

}  // namespace loom::ir
