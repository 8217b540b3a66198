#include "ir/text_format.h"

namespace loom::ir {

std::string PrintGraph(const Graph& graph) { return ""; }

absl::StatusOr<Graph> ParseGraph(absl::string_view text, absl::string_view filename) {
  return absl::UnimplementedError("text format parser not written yet");
}

}  // namespace loom::ir
