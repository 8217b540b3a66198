#ifndef LOOM_IR_TEXT_FORMAT_H_
#define LOOM_IR_TEXT_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace loom::ir {

// The textual IR (grammar in docs/formats.md). ParseGraph(PrintGraph(g)) == g.
std::string PrintGraph(const Graph& graph);

// Errors are InvalidArgument and start with "<filename>:<line>:<column>: ".
absl::StatusOr<Graph> ParseGraph(absl::string_view text,
                                 absl::string_view filename = "<text>");

}  // namespace loom::ir

#endif  // LOOM_IR_TEXT_FORMAT_H_
