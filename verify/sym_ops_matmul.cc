// Symbolic kernels of the matmul family (reference kernels: ir/ops/matmul.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> MatmulSymKernels() { return {}; }

}  // namespace loom::verify::internal
