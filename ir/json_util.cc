#include "ir/json_util.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/name_suggestion.h"
#include "ir/status_macros.h"

namespace loom::ir {

OrderedJson AttrToJson(const AttrValue& value) {
  OrderedJson j = OrderedJson::object();
  if (const auto* i = std::get_if<int64_t>(&value)) {
    j["int"] = *i;
  } else if (const auto* f = std::get_if<double>(&value)) {
    if (std::isnan(*f)) {
      j["float"] = "nan";
    } else if (std::isinf(*f)) {
      j["float"] = *f > 0 ? "inf" : "-inf";
    } else {
      j["float"] = *f;  // shortest representation that reads back to the same double
    }
  } else if (const auto* l = std::get_if<std::vector<int64_t>>(&value)) {
    j["ints"] = *l;
  } else {
    j["string"] = std::get<std::string>(value);
  }
  return j;
}

std::string AttrsToJson(const AttrMap& attrs) {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : attrs.values()) {
    absl::StrAppend(&out, first ? "" : ",", JsonString(name), ":", DumpJson(AttrToJson(value)));
    first = false;
  }
  out += "}";
  return out;
}

std::string DumpJson(const OrderedJson& j) {
  return j.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                nlohmann::detail::error_handler_t::replace);
}

std::string JsonString(absl::string_view s) { return DumpJson(OrderedJson(std::string(s))); }

std::string JsonExceptionMessage(const std::exception& e) {
  absl::string_view what = e.what();
  if (absl::StartsWith(what, "[json.exception.")) {
    size_t end = what.find("] ");
    if (end != absl::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

absl::Status JsonReader::Error(absl::string_view path, absl::string_view message) const {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(filename_, ": ", message));
  return absl::InvalidArgumentError(absl::StrCat(filename_, ": ", path, ": ", message));
}

absl::Status JsonReader::Wrap(absl::string_view path, const absl::Status& status) const {
  return absl::Status(status.code(), absl::StrCat(filename_, ": ", path, ": ", status.message()));
}

absl::StatusOr<const Json*> JsonReader::Field(const Json& object, absl::string_view key,
                                              absl::string_view path) const {
  auto it = object.find(std::string(key));
  if (it == object.end()) return Error(path, absl::StrCat("missing field '", key, "'"));
  return &*it;
}

absl::StatusOr<int64_t> JsonReader::Int(const Json& j, absl::string_view path) const {
  if (!j.is_number_integer()) return Error(path, "expected an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Error(path, "integer is out of range");
  }
  return j.get<int64_t>();
}

absl::StatusOr<int> JsonReader::Int32(const Json& j, absl::string_view path) const {
  LOOM_ASSIGN_OR_RETURN(int64_t v, Int(j, path));
  if (v < INT_MIN || v > INT_MAX) return Error(path, "integer is out of range");
  return static_cast<int>(v);
}

absl::StatusOr<bool> JsonReader::Bool(const Json& j, absl::string_view path) const {
  if (!j.is_boolean()) return Error(path, "expected true or false");
  return j.get<bool>();
}

absl::StatusOr<std::string> JsonReader::String(const Json& j, absl::string_view path) const {
  if (!j.is_string()) return Error(path, "expected a string");
  return j.get<std::string>();
}

absl::Status JsonReader::ExpectArray(const Json& j, absl::string_view path) const {
  if (!j.is_array()) return Error(path, "expected an array");
  return absl::OkStatus();
}

absl::Status JsonReader::ExpectObject(const Json& j, absl::string_view path) const {
  if (!j.is_object()) return Error(path, "expected an object");
  return absl::OkStatus();
}

absl::Status JsonReader::ExpectKeys(const Json& object, absl::string_view path,
                                    absl::Span<const std::string> known) const {
  if (!object.is_object()) return Error(path, "expected an object");
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string hint = absl::StrCat("its keys: ", absl::StrJoin(known, ", "));
    if (std::optional<std::string> meant = ClosestName(it.key(), known)) {
      hint = absl::StrCat("did you mean '", *meant, "'? (", hint, ")");
    }
    return Error(path.empty() ? it.key() : absl::StrCat(path, ".", it.key()),
                 absl::StrCat("unknown key; ", hint));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> JsonReader::IdList(const Json& j, absl::string_view path) const {
  LOOM_RETURN_IF_ERROR(ExpectArray(j, path));
  std::vector<int> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(int id, Int32(j[i], absl::StrCat(path, "[", i, "]")));
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<AttrValue> JsonReader::Attr(const Json& j, const std::string& path) const {
  if (!j.is_object() || j.size() != 1) {
    return Error(path, "expected an object with one key: int, float, ints or string");
  }
  const std::string& key = j.begin().key();
  const Json& v = j.begin().value();
  std::string inner = absl::StrCat(path, ".", key);
  if (key == "int") {
    LOOM_ASSIGN_OR_RETURN(int64_t i, Int(v, inner));
    return AttrValue(i);
  }
  if (key == "float") {
    if (v.is_number()) return AttrValue(v.get<double>());
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "inf") return AttrValue(HUGE_VAL);
      if (s == "-inf") return AttrValue(-HUGE_VAL);
      if (s == "nan") return AttrValue(std::nan(""));
    }
    return Error(inner, "expected a number, \"inf\", \"-inf\" or \"nan\"");
  }
  if (key == "ints") {
    LOOM_RETURN_IF_ERROR(ExpectArray(v, inner));
    std::vector<int64_t> values;
    for (size_t i = 0; i < v.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(int64_t x, Int(v[i], absl::StrCat(inner, "[", i, "]")));
      values.push_back(x);
    }
    return AttrValue(std::move(values));
  }
  if (key == "string") {
    LOOM_ASSIGN_OR_RETURN(std::string s, String(v, inner));
    return AttrValue(std::move(s));
  }
  return Error(path, absl::StrCat("unknown attribute encoding '", key,
                                  "' (expected int, float, ints or string)"));
}

absl::StatusOr<AttrMap> JsonReader::Attrs(const Json& j, const std::string& path) const {
  LOOM_RETURN_IF_ERROR(ExpectObject(j, path));
  AttrMap attrs;
  for (auto attr = j.begin(); attr != j.end(); ++attr) {
    LOOM_ASSIGN_OR_RETURN(AttrValue value,
                          Attr(attr.value(), absl::StrCat(path, ".", attr.key())));
    attrs.Set(attr.key(), std::move(value));
  }
  return attrs;
}

absl::Status CheckReadableFile(const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (a device, a FIFO or a socket); Loom reads regular files"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size,
                                                   " bytes, above the ", max_bytes,
                                                   " bytes Loom reads from one input"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, int64_t max_bytes) {
  LOOM_RETURN_IF_ERROR(CheckReadableFile(path, max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  // Read at most one byte past the limit: a file that grows meanwhile is refused
  // rather than followed.
  std::string text;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof(buffer));
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": above the ", max_bytes, " bytes Loom reads from one input"));
    }
  }
  if (in.bad()) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": read failed"));
  return text;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view text) {
  static std::atomic<int> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".", counter++);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot write"));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      int error = errno;
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      return absl::ErrnoToStatus(error, absl::StrCat(path, ": write failed"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    return absl::ErrnoToStatus(ec.value(), absl::StrCat(path, ": cannot rename into place"));
  }
  return absl::OkStatus();
}

}  // namespace loom::ir
