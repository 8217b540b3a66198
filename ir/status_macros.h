#ifndef LOOM_IR_STATUS_MACROS_H_
#define LOOM_IR_STATUS_MACROS_H_

// Status helpers missing from Debian's Abseil (20220623).

#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LOOM_STATUS_CONCAT_INNER_(a, b) a##b
#define LOOM_STATUS_CONCAT_(a, b) LOOM_STATUS_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define LOOM_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::absl::Status loom_status_ = (expr);           \
    if (!loom_status_.ok()) return loom_status_;    \
  } while (false)

// `LOOM_ASSIGN_OR_RETURN(auto x, F())` binds the value of a StatusOr or returns its error.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL_(LOOM_STATUS_CONCAT_(loom_statusor_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                                \
  if (!var.ok()) return std::move(var).status();   \
  lhs = std::move(var).value()

namespace loom::internal {

// Collects `<<` details for LOOM_RET_CHECK and converts to an Internal status.
class RetCheckBuilder {
 public:
  RetCheckBuilder(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": check failed: " << condition;
  }
  template <typename T>
  RetCheckBuilder& operator<<(const T& value) {
    if (!has_details_) {
      stream_ << ": ";
      has_details_ = true;
    }
    stream_ << value;
    return *this;
  }
  operator absl::Status() const { return absl::InternalError(stream_.str()); }  // NOLINT
  template <typename T>
  operator absl::StatusOr<T>() const {  // NOLINT
    return absl::StatusOr<T>(absl::InternalError(stream_.str()));
  }

 private:
  std::ostringstream stream_;
  bool has_details_ = false;
};

}  // namespace loom::internal

// Broken internal invariant: returns an Internal status with file, line and condition.
#define LOOM_RET_CHECK(cond) \
  if (cond) {                \
  } else /* NOLINT */        \
    return ::loom::internal::RetCheckBuilder(__FILE__, __LINE__, #cond)

#endif  // LOOM_IR_STATUS_MACROS_H_
