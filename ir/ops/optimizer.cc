// Optimizer ops: SGD, AdamW, grad-norm clipping.

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

void RegisterOptimizerOps(SchemaTable& table) {}

}  // namespace loom::ir
