// Shape ops: reshape, transpose, concat, slice, split, pad, expand.

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

void RegisterShapeOps(SchemaTable& table) {}

}  // namespace loom::ir
