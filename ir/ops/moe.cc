// Mixture-of-experts routing: top-k gating, dispatch, combine.

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

void RegisterMoeOps(SchemaTable& table) {}

}  // namespace loom::ir
