#ifndef LOOM_VERIFY_SYM_ELEMENTS_H_
#define LOOM_VERIFY_SYM_ELEMENTS_H_

// Element-level helpers shared by the symbolic kernels of the elementwise, shape,
// matmul and pointwise families: tensors filled with one term, maps over elements
// (with broadcasting), copies along a dim with the reference kernels' index
// arithmetic, and op-named errors.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/shape.h"
#include "smt/term.h"
#include "verify/sym_ops.h"

namespace loom::verify::internal {

// A tensor of the given type whose every element is `fill`.
SymTensor FilledLike(const ir::TensorType& type, smt::TermId fill);

// One tensor per entry of `out_types`, every element `fill`.
std::vector<SymTensor> FilledOutputs(absl::Span<const ir::TensorType> out_types, smt::TermId fill);


// Copies positions [src_begin, src_begin + count) along `dim` of `src` to the
// positions starting at `dst_begin` of `dst`; the two agree on every other dim.
// The row-major walk of the reference kernels' CopyAlongDim (ir/ops/shape.cc).
void CopyAlongDim(const SymTensor& src, int64_t src_begin, SymTensor& dst, int64_t dst_begin,
                  int64_t count, int dim);

// Applies `f` to every element of `x`, giving a tensor of type `out_type`.
SymTensor MapElements(const SymTensor& x, const ir::TensorType& out_type,
                      const std::function<smt::TermId(smt::TermId)>& f);

// Applies `f` to the elements of `a` and `b` that broadcast to each position of
// the output (NumPy's rule; the same position when the dims are the output's).
SymTensor MapElements2(const SymTensor& a, const SymTensor& b, const ir::TensorType& out_type,
                       const std::function<smt::TermId(smt::TermId, smt::TermId)>& f);

// `status` with "op '<op>': " in front of its message (OK stays OK).
absl::Status OpError(absl::string_view op, const absl::Status& status);

}  // namespace loom::verify::internal

#endif  // LOOM_VERIFY_SYM_ELEMENTS_H_
