#ifndef LOOM_IR_JSON_FORMAT_H_
#define LOOM_IR_JSON_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace loom::ir {

inline constexpr int kGraphJsonVersion = 1;

// Versioned JSON form of a graph (schema in docs/formats.md).
// GraphFromJson(GraphToJson(g)) == g.
std::string GraphToJson(const Graph& graph);

// Errors are InvalidArgument and name the file and the JSON path
// ("g.json: ops[12].inputs[1]: unknown tensor id 99").
absl::StatusOr<Graph> GraphFromJson(absl::string_view text,
                                    absl::string_view filename = "<json>");

// Reads a graph file in either format (JSON when the first non-blank character is '{').
absl::StatusOr<Graph> LoadGraphFile(const std::string& path);
// Writes JSON when `path` ends in ".json", text otherwise. Writes a temporary file
// and renames it, so a failure never leaves a half-written file.
absl::Status SaveGraphFile(const Graph& graph, const std::string& path);

}  // namespace loom::ir

#endif  // LOOM_IR_JSON_FORMAT_H_
