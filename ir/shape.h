#ifndef LOOM_IR_SHAPE_H_
#define LOOM_IR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::ir {

// X(enumerator, textual name, bytes per element, is floating point). Sorted by name.
#define LOOM_DTYPE_LIST(X)    \
  X(kBF16, "bf16", 2, true)   \
  X(kBool, "bool", 1, false)  \
  X(kF16, "f16", 2, true)     \
  X(kF32, "f32", 4, true)     \
  X(kF64, "f64", 8, true)     \
  X(kI32, "i32", 4, false)    \
  X(kI64, "i64", 8, false)

enum class DType {
#define LOOM_DTYPE_ENUM_(e, name, bytes, fp) e,
  LOOM_DTYPE_LIST(LOOM_DTYPE_ENUM_)
#undef LOOM_DTYPE_ENUM_
};

absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);
int64_t DTypeBytes(DType dtype);
bool IsFloat(DType dtype);

// A tensor shape: int64 dims, each optionally named (names are documentation and
// partitioning hints; they never change arithmetic). Rank 0 is a scalar.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims, std::vector<std::string> names = {});

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Empty when the dim is unnamed.
  absl::string_view dim_name(int i) const;
  bool has_names() const { return !names_.empty(); }
  const std::vector<std::string>& names() const { return names_; }
  void set_dim_name(int i, std::string name);

  int64_t num_elements() const;
  // Element strides of the row-major layout.
  std::vector<int64_t> Strides() const;

  // "[2,3]" or, with names, "[b:2,s:3]" (unnamed dims print as plain numbers).
  std::string ToString() const;

  // Same dims, names ignored.
  bool SameDims(const Shape& other) const { return dims_ == other.dims_; }
  bool operator==(const Shape& other) const {
    return dims_ == other.dims_ && names_ == other.names_;
  }
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::vector<int64_t> dims_;
  std::vector<std::string> names_;  // empty, or one per dim ("" = unnamed)
};

// Normalises a possibly negative dim index against `rank`.
absl::StatusOr<int> NormalizeDim(int64_t dim, int rank);

}  // namespace loom::ir

#endif  // LOOM_IR_SHAPE_H_
