#include "ir/shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::ir {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
#define LOOM_DTYPE_NAME_(e, name, bytes, fp) \
  case DType::e:                             \
    return name;
    LOOM_DTYPE_LIST(LOOM_DTYPE_NAME_)
#undef LOOM_DTYPE_NAME_
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
#define LOOM_DTYPE_PARSE_(e, text, bytes, fp) \
  if (name == text) return DType::e;
  LOOM_DTYPE_LIST(LOOM_DTYPE_PARSE_)
#undef LOOM_DTYPE_PARSE_
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t DTypeBytes(DType dtype) {
  switch (dtype) {
#define LOOM_DTYPE_BYTES_(e, name, bytes, fp) \
  case DType::e:                              \
    return bytes;
    LOOM_DTYPE_LIST(LOOM_DTYPE_BYTES_)
#undef LOOM_DTYPE_BYTES_
  }
  return 0;
}

bool IsFloat(DType dtype) {
  switch (dtype) {
#define LOOM_DTYPE_FP_(e, name, bytes, fp) \
  case DType::e:                           \
    return fp;
    LOOM_DTYPE_LIST(LOOM_DTYPE_FP_)
#undef LOOM_DTYPE_FP_
  }
  return false;
}

Shape::Shape(std::vector<int64_t> dims, std::vector<std::string> names)
    : dims_(std::move(dims)), names_(std::move(names)) {
  bool any = false;
  for (const auto& n : names_) any |= !n.empty();
  if (!any) names_.clear();
  if (!names_.empty()) names_.resize(dims_.size());
}

absl::string_view Shape::dim_name(int i) const {
  if (names_.empty()) return "";
  return names_[i];
}

void Shape::set_dim_name(int i, std::string name) {
  if (names_.empty()) {
    if (name.empty()) return;
    names_.resize(dims_.size());
  }
  names_[i] = std::move(name);
  bool any = false;
  for (const auto& n : names_) any |= !n.empty();
  if (!any) names_.clear();
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::vector<int64_t> Shape::Strides() const {
  std::vector<int64_t> strides(dims_.size(), 1);
  for (int i = rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims_[i + 1];
  return strides;
}

std::string Shape::ToString() const {
  std::string out = "[";
  for (int i = 0; i < rank(); ++i) {
    if (i > 0) out += ",";
    if (!dim_name(i).empty()) absl::StrAppend(&out, dim_name(i), ":");
    absl::StrAppend(&out, dims_[i]);
  }
  out += "]";
  return out;
}

absl::StatusOr<int> NormalizeDim(int64_t dim, int rank) {
  int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " is out of range for rank ", rank));
  }
  return static_cast<int>(d);
}

}  // namespace loom::ir
