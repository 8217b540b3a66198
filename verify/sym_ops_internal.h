#ifndef LOOM_VERIFY_SYM_OPS_INTERNAL_H_
#define LOOM_VERIFY_SYM_OPS_INTERNAL_H_

// Per-family lists of symbolic kernels, gathered by verify/sym_ops.cc. Each
// family lives in verify/sym_ops_<family>.cc next to the reference kernels'
// ir/ops/<family>.cc.

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "smt/term.h"
#include "verify/sym_ops.h"

namespace loom::verify::internal {

// The parts of a symbolic kernel's signature (SymKernelFn), named once for the
// families' files.
using TermId = smt::TermId;
using Terms = smt::Terms;
using Outputs = absl::StatusOr<std::vector<SymTensor>>;
using Inputs = absl::Span<const SymTensor* const>;
using OutTypes = absl::Span<const ir::TensorType>;

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
