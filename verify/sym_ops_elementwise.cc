// Symbolic kernels of the elementwise family (reference kernels: ir/ops/elementwise.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> ElementwiseSymKernels() { return {}; }

}  // namespace loom::verify::internal
