#ifndef LOOM_VERIFY_SYM_OPS_INTERNAL_H_
#define LOOM_VERIFY_SYM_OPS_INTERNAL_H_

// Per-family lists of symbolic kernels, gathered by verify/sym_ops.cc. Each
// family lives in verify/sym_ops_<family>.cc next to the reference kernels'
// ir/ops/<family>.cc.

#include <vector>

#include "verify/sym_ops.h"

namespace loom::verify::internal {

std::vector<SymKernel> ElementwiseSymKernels();
std::vector<SymKernel> ShapeSymKernels();
std::vector<SymKernel> MatmulSymKernels();
std::vector<SymKernel> ReduceSymKernels();
std::vector<SymKernel> AttentionSymKernels();
std::vector<SymKernel> LossSymKernels();
std::vector<SymKernel> MoeSymKernels();
std::vector<SymKernel> NormSymKernels();
std::vector<SymKernel> OptimizerSymKernels();
std::vector<SymKernel> PointwiseSymKernels();
std::vector<SymKernel> IndexSymKernels();

}  // namespace loom::verify::internal

#endif  // LOOM_VERIFY_SYM_OPS_INTERNAL_H_
