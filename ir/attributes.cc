#include "ir/attributes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::ir {
namespace {

std::string FormatFloat(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  char buf[64];
  // Shortest representation that parses back to the same double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string out = buf;
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

std::string EscapeString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += "\"";
  return out;
}

absl::Status Missing(absl::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
}

absl::Status WrongType(absl::string_view name, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("attribute '", name, "' must be ", want));
}

}  // namespace

std::string AttrValueToString(const AttrValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  if (const auto* f = std::get_if<double>(&value)) return FormatFloat(*f);
  if (const auto* l = std::get_if<std::vector<int64_t>>(&value)) {
    return absl::StrCat("[", absl::StrJoin(*l, ","), "]");
  }
  return EscapeString(std::get<std::string>(value));
}

AttrMap::AttrMap(std::initializer_list<Entry> init) {
  for (const Entry& e : init) {
    if (!Has(e.first)) Set(e.first, e.second);
  }
}

std::vector<AttrMap::Entry>::const_iterator AttrMap::LowerBound(absl::string_view name) const {
  return std::lower_bound(values_.begin(), values_.end(), name,
                          [](const Entry& e, absl::string_view n) { return e.first < n; });
}

const AttrValue* AttrMap::Find(absl::string_view name) const {
  auto it = LowerBound(name);
  return it != values_.end() && it->first == name ? &it->second : nullptr;
}

void AttrMap::Set(const std::string& name, AttrValue value) {
  auto it = LowerBound(name);
  if (it != values_.end() && it->first == name) {
    values_[it - values_.begin()].second = std::move(value);
    return;
  }
  values_.insert(values_.begin() + (it - values_.begin()), Entry{name, std::move(value)});
}

void AttrMap::Erase(absl::string_view name) {
  auto it = LowerBound(name);
  if (it != values_.end() && it->first == name) {
    values_.erase(values_.begin() + (it - values_.begin()));
  }
}

absl::StatusOr<int64_t> AttrMap::GetInt(absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name);
  if (const auto* i = std::get_if<int64_t>(value)) return *i;
  return WrongType(name, "an integer");
}

absl::StatusOr<double> AttrMap::GetFloat(absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name);
  if (const auto* f = std::get_if<double>(value)) return *f;
  if (const auto* i = std::get_if<int64_t>(value)) return static_cast<double>(*i);
  return WrongType(name, "a number");
}

absl::StatusOr<std::vector<int64_t>> AttrMap::GetInts(absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name);
  if (const auto* l = std::get_if<std::vector<int64_t>>(value)) return *l;
  return WrongType(name, "an integer list");
}

absl::StatusOr<std::string> AttrMap::GetString(absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name);
  if (const auto* s = std::get_if<std::string>(value)) return *s;
  return WrongType(name, "a string");
}

absl::StatusOr<int64_t> AttrMap::GetInt(absl::string_view name,
                                        int64_t default_value) const {
  if (!Has(name)) return default_value;
  return GetInt(name);
}

absl::StatusOr<double> AttrMap::GetFloat(absl::string_view name,
                                         double default_value) const {
  if (!Has(name)) return default_value;
  return GetFloat(name);
}

absl::StatusOr<std::string> AttrMap::GetString(absl::string_view name,
                                               absl::string_view default_value) const {
  if (!Has(name)) return std::string(default_value);
  return GetString(name);
}

std::string AttrMap::ToString() const {
  if (values_.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : values_) {
    if (!first) out += ", ";
    first = false;
    absl::StrAppend(&out, name, "=", AttrValueToString(value));
  }
  out += "}";
  return out;
}

}  // namespace loom::ir
