#ifndef LOOM_IR_ATTRIBUTES_H_
#define LOOM_IR_ATTRIBUTES_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
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
// One contiguous array: an op has a handful of attributes, and plans compare and
// copy them per task, where a tree's nodes would each be a separate allocation.
class AttrMap {
 public:
  using Entry = std::pair<std::string, AttrValue>;

  AttrMap() = default;
  // A name given twice keeps its first value (as a map built from the list would).
  AttrMap(std::initializer_list<Entry> init);

  void Set(const std::string& name, AttrValue value);
  // Removes `name` where set.
  void Erase(absl::string_view name);
  bool Has(absl::string_view name) const { return Find(name) != nullptr; }
  // The value of `name`, or null.
  const AttrValue* Find(absl::string_view name) const;
  // Every attribute, sorted by name.
  const std::vector<Entry>& values() const { return values_; }
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
  // The first entry whose name is not less than `name`.
  std::vector<Entry>::const_iterator LowerBound(absl::string_view name) const;

  std::vector<Entry> values_;  // sorted by name, names distinct
};

}  // namespace loom::ir

#endif  // LOOM_IR_ATTRIBUTES_H_
