// Symbolic kernels of the optimizer family (reference kernels: ir/ops/optimizer.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> OptimizerSymKernels() { return {}; }

}  // namespace loom::verify::internal
