#ifndef LOOM_IR_OPS_ELEMENT_INDEX_H_
#define LOOM_IR_OPS_ELEMENT_INDEX_H_

// Index arithmetic that the reference kernels (ir/ops/), the symbolic kernels
// (verify/sym_ops_*) and the CPU backend (exec/) share: which elements a
// reduction folds together, a tensor seen around one axis, a matmul's dims. Only
// the bookkeeping of positions is shared; each keeps its own formulas, which the
// differential tests compare.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/attributes.h"
#include "ir/shape.h"

namespace loom::ir::ops {

// Product of dims [begin, end) of `s`.
int64_t DimProduct(const Shape& s, int begin, int end);

// Which dims of `shape` attribute `dims` reduces: each in [-rank, rank), none twice.
absl::StatusOr<std::vector<bool>> ReducedDims(const Shape& shape, const AttrMap& attrs);
// Attribute `dim`, normalised against `shape`.
absl::StatusOr<int> AxisAttr(const Shape& shape, const AttrMap& attrs);

// For each element of `shape` in row-major order, its flat index in the tensor
// obtained by removing the dims marked in `reduced`.
std::vector<int64_t> ProjectIndices(const Shape& shape, const std::vector<bool>& reduced);

// A tensor seen as [outer, n, inner] around one dim.
struct AxisView {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
  int64_t at(int64_t o, int64_t k, int64_t i) const { return (o * n + k) * inner + i; }
};
AxisView ViewAround(const Shape& shape, int dim);

// a [..., m, k] @ b [..., k, n] (the same batch dims) or b [k, n]: `batch`
// products of m x k by k x n; b's offset for batch p is b_offset(p).
struct MatMulDims {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  bool b_batched = false;
  int64_t b_offset(int64_t p) const { return b_batched ? p * k * n : 0; }
};
MatMulDims MatMulDimsOf(const Shape& a, const Shape& b);

}  // namespace loom::ir::ops

#endif  // LOOM_IR_OPS_ELEMENT_INDEX_H_
