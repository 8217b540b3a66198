// Symbolic kernels of the moe family (reference kernels: ir/ops/moe.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> MoeSymKernels() { return {}; }

}  // namespace loom::verify::internal
