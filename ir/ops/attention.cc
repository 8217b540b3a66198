// Attention and RoPE.

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

void RegisterAttentionOps(SchemaTable& table) {}

}  // namespace loom::ir
