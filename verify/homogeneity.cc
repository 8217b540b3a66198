#include "verify/homogeneity.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "ir/op_schema.h"

namespace loom::verify {

std::vector<std::vector<int>> LinearGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out) {
  const ir::OpSchema& schema = ir::GetOpSchema(kind);
  if (schema.linear_into_floats_only &&
      (in.empty() || out.empty() || in[0].dtype == ir::DType::kBool ||
       !ir::IsFloat(out[0].dtype))) {
    return {};
  }
  std::vector<std::vector<int>> groups = schema.linear_in;
  if (schema.linear_in_every_input) {
    std::vector<int> all(in.size());
    for (size_t i = 0; i < in.size(); ++i) all[i] = static_cast<int>(i);
    groups.push_back(std::move(all));
  }
  return groups;
}

std::vector<Homogeneity> HomogeneousGroups(ir::OpKind kind, absl::Span<const ir::TensorType> in,
                                           absl::Span<const ir::TensorType> out) {
  std::vector<Homogeneity> groups;
  for (std::vector<int>& g : LinearGroups(kind, in, out)) groups.push_back({std::move(g), 1});
  for (const ir::InputGroup& g : ir::GetOpSchema(kind).homogeneous_in) {
    groups.push_back({g.positions, g.exponent});
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
