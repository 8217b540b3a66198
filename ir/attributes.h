#ifndef LOOM_IR_ATTRIBUTES_H_
#define LOOM_IR_ATTRIBUTES_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::ir {

// An op attribute: integer, float, integer list or string.
using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

// Prints a value in the textual IR's syntax: 3, 0.5, [1,2], "softmax".
// Floats always carry a '.' or an exponent and round-trip exactly.
std::string AttrValueToString(const AttrValue& value);

// Named attributes of an op, kept sorted by name so printing is deterministic.
class AttrMap {
 public:
  AttrMap() = default;
  AttrMap(std::initializer_list<std::pair<const std::string, AttrValue>> init)
      : values_(init) {}

  void Set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool Has(absl::string_view name) const { return values_.count(std::string(name)) > 0; }
  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool empty() const { return values_.empty(); }

  // Typed getters. A missing attribute or one of the wrong type is InvalidArgument
  // naming the attribute. GetFloat also accepts an integer value.
  absl::StatusOr<int64_t> GetInt(absl::string_view name) const;
  absl::StatusOr<double> GetFloat(absl::string_view name) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name) const;
  absl::StatusOr<std::string> GetString(absl::string_view name) const;
  // With a default for a missing attribute (a wrong type is still an error).
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t default_value) const;
  absl::StatusOr<double> GetFloat(absl::string_view name, double default_value) const;
  absl::StatusOr<std::string> GetString(absl::string_view name,
                                        absl::string_view default_value) const;

  // "{a=1, b=[2,3]}" or "" when empty.
  std::string ToString() const;

  bool operator==(const AttrMap& other) const { return values_ == other.values_; }
  bool operator!=(const AttrMap& other) const { return !(*this == other); }

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace loom::ir

#endif  // LOOM_IR_ATTRIBUTES_H_
