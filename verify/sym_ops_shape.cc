// Symbolic kernels of the shape family (reference kernels: ir/ops/shape.cc).

#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {

std::vector<SymKernel> ShapeSymKernels() { return {}; }

}  // namespace loom::verify::internal
