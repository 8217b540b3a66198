#ifndef LOOM_IR_JSON_UTIL_H_
#define LOOM_IR_JSON_UTIL_H_

// Helpers shared by the JSON formats (graph, plan): the tagged attribute encoding,
// compact dumping, path-naming readers and whole-file reading / atomic writing.

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "nlohmann/json.hpp"

namespace loom::ir {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// {"int": 3} | {"float": 0.5} | {"float": "inf"} | {"ints": [1,2]} | {"string": "x"}
OrderedJson AttrToJson(const AttrValue& value);
// `"attrs"` object of an attribute map: {"dim":{"int":1},...}, keys sorted.
std::string AttrsToJson(const AttrMap& attrs);

// Compact, no indentation; bytes that are not UTF-8 are replaced rather than thrown on.
std::string DumpJson(const OrderedJson& j);
// A JSON string literal for `s` (quoted, escaped, invalid UTF-8 replaced).
std::string JsonString(absl::string_view s);

// "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
std::string JsonExceptionMessage(const std::exception& e);

// Reads a parsed document, naming the file and the JSON path of every error
// ("g.json: ops[12].inputs[1]: unknown tensor id 99").
class JsonReader {
 public:
  explicit JsonReader(absl::string_view filename) : filename_(filename) {}

  const std::string& filename() const { return filename_; }
  absl::Status Error(absl::string_view path, absl::string_view message) const;
  // Passes a status through, prefixed with the file and path.
  absl::Status Wrap(absl::string_view path, const absl::Status& status) const;

  absl::StatusOr<const Json*> Field(const Json& object, absl::string_view key,
                                    absl::string_view path) const;
  absl::StatusOr<int64_t> Int(const Json& j, absl::string_view path) const;
  absl::StatusOr<int> Int32(const Json& j, absl::string_view path) const;
  absl::StatusOr<bool> Bool(const Json& j, absl::string_view path) const;
  absl::StatusOr<std::string> String(const Json& j, absl::string_view path) const;
  absl::Status ExpectArray(const Json& j, absl::string_view path) const;
  absl::Status ExpectObject(const Json& j, absl::string_view path) const;
  // An object's keys must be among `known`: an unknown one is an error naming it,
  // the key it most likely meant and the keys the format has.
  absl::Status ExpectKeys(const Json& object, absl::string_view path,
                          absl::Span<const std::string> known) const;
  absl::StatusOr<std::vector<int>> IdList(const Json& j, absl::string_view path) const;
  // One tagged attribute value, and an "attrs" object of them.
  absl::StatusOr<AttrValue> Attr(const Json& j, const std::string& path) const;
  absl::StatusOr<AttrMap> Attrs(const Json& j, const std::string& path) const;

 private:
  std::string filename_;
};

// Inputs above this size are refused: a reader never grows without bound (an
// explicit plan of Llama 3 8B on 32 devices is about 30 MB; write larger plans
// factored).
inline constexpr int64_t kMaxInputFileBytes = int64_t{1} << 30;

// The whole file; NotFound when it does not exist, InvalidArgument when it is not
// a regular file (a directory, a device such as /dev/zero, a FIFO; links are
// followed) or holds more than `max_bytes`.
absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         int64_t max_bytes = kMaxInputFileBytes);
// OK when `path` names a regular file of at most `max_bytes` (links followed).
absl::Status CheckReadableFile(const std::string& path, int64_t max_bytes);
// Writes `<path>.tmp.<pid>.<n>` and renames it onto `path`; on failure the target is
// untouched and the temporary file removed.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text);

}  // namespace loom::ir

#endif  // LOOM_IR_JSON_UTIL_H_
