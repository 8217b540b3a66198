#include "ir/name_suggestion.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"

namespace loom::ir {

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

namespace {

// Whether `a` and `b` are one edit apart or two (a typo of a name), or one holds
// the other.
bool NearMiss(absl::string_view a, absl::string_view b) {
  return EditDistance(a, b) <= 2 || absl::StrContains(a, b) || absl::StrContains(b, a);
}

}  // namespace

std::optional<std::string> ClosestName(absl::string_view name,
                                       absl::Span<const std::string> candidates) {
  // The nearest of the near misses (the first of equals).
  std::optional<std::string> best;
  int best_distance = 0;
  for (const std::string& c : candidates) {
    if (!NearMiss(name, c)) continue;
    const int d = EditDistance(name, c);
    if (!best.has_value() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace loom::ir
