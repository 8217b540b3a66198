#include "ir/op_kind.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::ir {
namespace {

struct OpKindInfo {
  absl::string_view name;
  OpArity arity;
};

constexpr OpKindInfo kOpKindInfo[] = {
#define LOOM_OP_KIND_INFO_(e, name, min_in, max_in, outs) {name, {min_in, max_in, outs}},
    LOOM_OP_KIND_LIST(LOOM_OP_KIND_INFO_)
#undef LOOM_OP_KIND_INFO_
};

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  return kOpKindInfo[static_cast<int>(kind)].name;
}

absl::StatusOr<OpKind> ParseOpKind(absl::string_view name) {
  // The list is sorted, so a binary search finds the name.
  int lo = 0, hi = kNumOpKinds;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (kOpKindInfo[mid].name < name) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < kNumOpKinds && kOpKindInfo[lo].name == name) return static_cast<OpKind>(lo);
  return absl::InvalidArgumentError(absl::StrCat("unknown op '", name, "'"));
}

OpArity GetOpArity(OpKind kind) { return kOpKindInfo[static_cast<int>(kind)].arity; }

}  // namespace loom::ir
