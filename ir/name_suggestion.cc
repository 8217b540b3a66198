#include "ir/name_suggestion.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"

namespace loom::ir {
namespace {

// Whether `a` and `b` are one edit apart or two (a typo of a name), or one holds
// the other.
bool NearMiss(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()] <= 2 || absl::StrContains(a, b) || absl::StrContains(b, a);
}

}  // namespace

std::optional<std::string> ClosestName(absl::string_view name,
                                       absl::Span<const std::string> candidates) {
  for (const std::string& c : candidates) {
    if (NearMiss(name, c)) return c;
  }
  return std::nullopt;
}

}  // namespace loom::ir
