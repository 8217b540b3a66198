#include <algorithm>
#include <numeric>

#include "tests/ir/op_samples.h"

namespace loom::ir::testing {
namespace {

using FillFn = std::function<void(int i, HostTensor& value, std::mt19937_64& rng)>;

// Floats uniform in [-1, 1], except input `index_input`: [T, k] expert indices,
// distinct within a row, drawn from [0, experts).
FillFn RoutingFill(int index_input, int64_t experts) {
  return [index_input, experts](int i, HostTensor& v, std::mt19937_64& rng) {
    if (i != index_input) {
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      for (double& x : v.data) x = dist(rng);
      return;
    }
    const int64_t k = v.shape.dim(1);
    std::vector<int64_t> perm(experts);
    for (int64_t t = 0; t < v.shape.dim(0); ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t j = 0; j < k; ++j) v[t * k + j] = static_cast<double>(perm[j]);
    }
  };
}

// Gate logits [T, E] whose values in a row are at least 0.3 apart, so the top-k
// choice has no ties and survives small perturbations.
void SpacedLogits(int, HostTensor& v, std::mt19937_64& rng) {
  const int64_t experts = v.shape.dim(1);
  std::uniform_real_distribution<double> jitter(0.0, 0.1);
  std::vector<int64_t> perm(experts);
  for (int64_t t = 0; t < v.shape.dim(0); ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < experts; ++e) {
      v[t * experts + e] = 0.4 * static_cast<double>(perm[e]) - 0.8 + jitter(rng);
    }
  }
}

}  // namespace

void AddMoeSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t tokens = RandomDim(rng, 3, 5);
  const int64_t experts = RandomDim(rng, 3, 4);
  const int64_t k = 2;
  const int64_t d = RandomDim(rng, 2, 3);
  const int64_t ample = tokens;  // no expert receives more than T pairs
  const int64_t tight = 1;       // T*k >= 6 pairs into E slots: some are dropped
  TensorType logits = F64({tokens, experts});
  TensorType x = F64({tokens, d});
  TensorType routed = F64({tokens, k});
  TensorType indices = I64({tokens, k});
  auto gate = [&](std::string score, int64_t normalize) {
    return AttrMap{{"k", k}, {"score", std::move(score)}, {"normalize", normalize}};
  };
  auto slots = [&](int64_t capacity) {
    return AttrMap{{"experts", experts}, {"capacity", capacity}};
  };

  out.push_back({"softmax", OpKind::kTopKGate, {logits}, gate("softmax", 0), SpacedLogits});
  out.push_back({"softmax_normalized", OpKind::kTopKGate, {logits}, gate("softmax", 1),
                 SpacedLogits});
  out.push_back({"sigmoid_normalized", OpKind::kTopKGate, {logits}, gate("sigmoid", 1),
                 SpacedLogits});
  out.push_back({"softmax_normalized", OpKind::kTopKGateGrad, {logits, indices, routed},
                 gate("softmax", 1), RoutingFill(1, experts), experts});
  out.push_back({"sigmoid", OpKind::kTopKGateGrad, {logits, indices, routed},
                 gate("sigmoid", 0), RoutingFill(1, experts), experts});

  out.push_back({"ample", OpKind::kMoeDispatch, {x, indices}, slots(ample),
                 RoutingFill(1, experts), experts});
  out.push_back({"overflow", OpKind::kMoeDispatch, {x, indices}, slots(tight),
                 RoutingFill(1, experts), experts});
  AttrMap dispatch_grad = slots(tight);
  dispatch_grad.Set("tokens", tokens);
  out.push_back({"overflow", OpKind::kMoeDispatchGrad, {F64({experts, tight, d}), indices},
                 dispatch_grad, RoutingFill(1, experts), experts});

  for (int64_t capacity : {ample, tight}) {
    std::string label = capacity == ample ? "ample" : "overflow";
    TensorType expert_out = F64({experts, capacity, d});
    out.push_back({label, OpKind::kMoeCombine, {expert_out, routed, indices}, {},
                   RoutingFill(2, experts), experts});
    out.push_back({label, OpKind::kMoeCombineGrad, {expert_out, routed, indices, x}, {},
                   RoutingFill(2, experts), experts});
  }

  // Two groups of two tokens, each with its own C slots per expert: 2 is ample (a
  // group routes at most 2 pairs to an expert), 1 drops pairs when a group's two
  // tokens share an expert.
  const int64_t groups = 2;
  const int64_t group_tokens = 2;
  TensorType gx = F64({groups * group_tokens, d});
  TensorType grouted = F64({groups * group_tokens, k});
  TensorType gindices = I64({groups * group_tokens, k});
  for (int64_t capacity : {group_tokens, tight}) {
    std::string label = capacity == group_tokens ? "grouped_ample" : "grouped_overflow";
    AttrMap grouped = slots(capacity);
    grouped.Set("groups", groups);
    TensorType expert_out = F64({experts, groups * capacity, d});
    out.push_back({label, OpKind::kMoeDispatch, {gx, gindices}, grouped,
                   RoutingFill(1, experts), experts});
    AttrMap grouped_grad = grouped;
    grouped_grad.Set("tokens", groups * group_tokens);
    out.push_back({label, OpKind::kMoeDispatchGrad, {expert_out, gindices}, grouped_grad,
                   RoutingFill(1, experts), experts});
    AttrMap combine{{"groups", groups}};
    out.push_back({label, OpKind::kMoeCombine, {expert_out, grouted, gindices}, combine,
                   RoutingFill(2, experts), experts});
    out.push_back({label, OpKind::kMoeCombineGrad, {expert_out, grouted, gindices, gx}, combine,
                   RoutingFill(2, experts), experts});
  }
}

}  // namespace loom::ir::testing
