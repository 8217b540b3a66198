// Reductions, softmax and losses.

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

void RegisterReduceOps(SchemaTable& table) {}

}  // namespace loom::ir
