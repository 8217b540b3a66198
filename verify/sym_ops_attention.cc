// Symbolic kernels of the attention family (reference kernels: ir/ops/attention.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> AttentionSymKernels() { return {}; }

}  // namespace loom::verify::internal
