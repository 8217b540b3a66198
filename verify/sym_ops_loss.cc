// Symbolic kernels of the loss family (reference kernels: ir/ops/loss.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> LossSymKernels() { return {}; }

}  // namespace loom::verify::internal
