// Symbolic kernels of the norm family (reference kernels: ir/ops/norm.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> NormSymKernels() { return {}; }

}  // namespace loom::verify::internal
