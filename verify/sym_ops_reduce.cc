// Symbolic kernels of the reduce family (reference kernels: ir/ops/reduce.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> ReduceSymKernels() { return {}; }

}  // namespace loom::verify::internal
