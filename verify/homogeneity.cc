#include "verify/homogeneity.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace loom::verify {

using ir::OpKind;

std::vector<std::vector<int>> LinearGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out) {
  const int num_inputs = static_cast<int>(in.size());
  std::vector<int> all(num_inputs);
  for (int i = 0; i < num_inputs; ++i) all[i] = i;
  switch (kind) {
    case OpKind::kCast:
      if (!in.empty() && !out.empty() && ir::IsFloat(in[0].dtype) && ir::IsFloat(out[0].dtype)) {
        return {{0}};
      }
      return {};
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kAccumulate:
    case OpKind::kConcat:
      return {all};
    case OpKind::kNeg:
    case OpKind::kScale:
    case OpKind::kTranspose:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kSplit:
    case OpKind::kExpand:
    case OpKind::kPad:
    case OpKind::kSum:
    case OpKind::kStopGradient:
    case OpKind::kMulScalar:
    case OpKind::kDivScalar:
    case OpKind::kDiv:
    case OpKind::kCumsum:
    case OpKind::kIndex:
      return {{0}};
    case OpKind::kWhere:
      return {{1, 2}};
    case OpKind::kMul:
    case OpKind::kMatMul:
    case OpKind::kLinearWGrad:
      return {{0}, {1}};
    case OpKind::kLinear:
      return {{0, 2}, {1, 2}};
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingGrad:
      return {{1}};
    default:
      return {};
  }
}

std::vector<Homogeneity> HomogeneousGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out) {
  std::vector<Homogeneity> groups;
  for (std::vector<int>& g : LinearGroups(kind, in, out)) groups.push_back({std::move(g), 1});
  switch (kind) {
    case OpKind::kDiv:
    case OpKind::kDivScalar:
      groups.push_back({{1}, -1});
      break;
    case OpKind::kMulScalar:
      groups.push_back({{1}, 1});
      break;
    case OpKind::kPick:
    case OpKind::kMean:
    case OpKind::kRope:
    case OpKind::kMoeDispatch:
    case OpKind::kMoeDispatchGrad:
      groups.push_back({{0}, 1});
      break;
    case OpKind::kMoeCombine:
      groups.push_back({{0}, 1});
      groups.push_back({{1}, 1});
      break;
    case OpKind::kSiluGrad:
    case OpKind::kReluGrad:
    case OpKind::kGeluGrad:
    case OpKind::kGeluExactGrad:
    case OpKind::kTanhGrad:
    case OpKind::kSigmoidGrad:
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmaxGrad:
    case OpKind::kMaxGrad:
    case OpKind::kPickGrad:
      groups.push_back({{1}, 1});
      break;
    case OpKind::kRmsNormGrad:
    case OpKind::kLayerNormGrad:
    case OpKind::kSwiGluGrad:
    case OpKind::kCrossEntropyGrad:
    case OpKind::kTopKGateGrad:
      groups.push_back({{2}, 1});
      break;
    case OpKind::kAttentionGrad:
    case OpKind::kMoeCombineGrad:
      groups.push_back({{3}, 1});
      break;
    default:
      break;
  }
  // Positions the op has (a linear without its bias has no operand 2).
  std::vector<Homogeneity> kept;
  for (Homogeneity& g : groups) {
    std::vector<int> positions;
    for (int i : g.positions) {
      if (i < static_cast<int>(in.size())) positions.push_back(i);
    }
    if (!positions.empty()) kept.push_back({std::move(positions), g.exponent});
  }
  return kept;
}

PieceScale ScaleOfPiece(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                        absl::Span<const ir::TensorType> out,
                        absl::Span<const ir::Rational> factor, absl::Span<const char> zero) {
  std::vector<int> scaled;
  for (size_t i = 0; i < factor.size(); ++i) {
    if (!factor[i].IsOne() && !zero[i]) scaled.push_back(static_cast<int>(i));
  }
  PieceScale result;
  if (scaled.empty()) return result;
  const std::vector<Homogeneity> groups = HomogeneousGroups(kind, in, out);
  std::vector<char> covered(factor.size(), 0);
  for (int i : scaled) {
    if (covered[i]) continue;
    bool found = false;
    for (const Homogeneity& g : groups) {
      if (std::find(g.positions.begin(), g.positions.end(), i) == g.positions.end()) continue;
      bool usable = true;
      for (int j : g.positions) {
        if (j >= static_cast<int>(factor.size()) || covered[j]) usable = false;
        if (usable && !zero[j] && factor[j] != factor[i]) usable = false;
      }
      if (!usable) continue;
      for (int j : g.positions) covered[j] = 1;
      std::optional<ir::Rational> next = g.exponent > 0 ? ir::Multiply(result.factor, factor[i])
                                                        : ir::Divide(result.factor, factor[i]);
      if (!next.has_value()) {
        result.operand = i;
        result.why = "scales it beyond exact arithmetic";
        return result;
      }
      result.factor = *next;
      found = true;
      break;
    }
    if (!found) {
      result.operand = i;
      result.why = "is not proportional to it alone";
      return result;
    }
  }
  return result;
}

EvenShares EvenShareFactors(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                            absl::Span<const ir::TensorType> out,
                            absl::Span<const ir::Rational> factor, absl::Span<const char> zero,
                            absl::Span<const int64_t> members) {
  EvenShares result;
  result.factor.assign(factor.begin(), factor.end());
  result.even.assign(factor.size(), 0);
  const int n = static_cast<int>(factor.size());
  if (static_cast<int>(zero.size()) != n || static_cast<int>(members.size()) != n) return result;
  for (const std::vector<int>& group : LinearGroups(kind, in, out)) {
    int64_t count = 0;
    bool whole = false;
    bool usable = true;
    for (int i : group) {
      if (i >= n || zero[i]) continue;
      if (members[i] == 0 && factor[i].IsOne()) {
        whole = true;
      } else if (members[i] > 1 && factor[i] == ir::Rational::Of(members[i], 1) &&
                 (count == 0 || count == members[i])) {
        count = members[i];
      } else {
        usable = false;
      }
    }
    if (!usable || !whole || count == 0) continue;
    for (int i : group) {
      if (i >= n || zero[i] || members[i] != 0) continue;
      result.factor[i] = ir::Rational::Of(count, 1);
      result.even[i] = 1;
    }
  }
  return result;
}

}  // namespace loom::verify
