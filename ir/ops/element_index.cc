#include "ir/ops/element_index.h"

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::ir::ops {

int64_t DimProduct(const Shape& s, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= s.dim(i);
  return n;
}

absl::StatusOr<std::vector<bool>> ReducedDims(const Shape& shape, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("dims"));
  std::vector<bool> reduced(shape.rank(), false);
  for (int64_t d : dims) {
    auto n = NormalizeDim(d, shape.rank());
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'dims': ", n.status().message()));
    }
    if (reduced[*n]) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'dims' names dim ", *n, " more than once"));
    }
    reduced[*n] = true;
  }
  return reduced;
}

absl::StatusOr<int> AxisAttr(const Shape& shape, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  auto n = NormalizeDim(dim, shape.rank());
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'dim': ", n.status().message()));
  }
  return *n;
}

std::vector<int64_t> ProjectIndices(const Shape& shape, const std::vector<bool>& reduced) {
  const int rank = shape.rank();
  std::vector<int64_t> stride(rank, 0);
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (reduced[d]) continue;
    stride[d] = s;
    s *= shape.dim(d);
  }
  std::vector<int64_t> index(static_cast<size_t>(shape.num_elements()));
  std::vector<int64_t> coord(rank, 0);
  for (size_t i = 0; i < index.size(); ++i) {
    int64_t o = 0;
    for (int d = 0; d < rank; ++d) o += coord[d] * stride[d];
    index[i] = o;
    for (int d = rank - 1; d >= 0; --d) {
      if (++coord[d] < shape.dim(d)) break;
      coord[d] = 0;
    }
  }
  return index;
}

AxisView ViewAround(const Shape& shape, int dim) {
  AxisView v;
  for (int d = 0; d < dim; ++d) v.outer *= shape.dim(d);
  v.n = shape.dim(dim);
  for (int d = dim + 1; d < shape.rank(); ++d) v.inner *= shape.dim(d);
  return v;
}

MatMulDims MatMulDimsOf(const Shape& a, const Shape& b) {
  const int rank = a.rank();
  MatMulDims d;
  d.batch = DimProduct(a, 0, rank - 2);
  d.m = a.dim(rank - 2);
  d.k = a.dim(rank - 1);
  d.n = b.dim(b.rank() - 1);
  d.b_batched = b.rank() > 2;
  return d;
}

}  // namespace loom::ir::ops
