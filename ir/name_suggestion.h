#ifndef LOOM_IR_NAME_SUGGESTION_H_
#define LOOM_IR_NAME_SUGGESTION_H_

// What a misspelt name most likely meant, for "did you mean" in error messages.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom::ir {

// Levenshtein distance: the insertions, deletions and substitutions from a to b.
int EditDistance(absl::string_view a, absl::string_view b);

// The nearest candidate (by edits; the first of equals) within two edits of `name`, or containing it, or contained in
// it; nullopt when there is none.
std::optional<std::string> ClosestName(absl::string_view name,
                                       absl::Span<const std::string> candidates);

}  // namespace loom::ir

#endif  // LOOM_IR_NAME_SUGGESTION_H_
