#include "ir/ops/reduce_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::ir::ops {

int64_t Rows(const Shape& shape) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < shape.rank(); ++d) rows *= shape.dim(d);
  return rows;
}

double RowMax(const double* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

double LogSumExp(const double* x, int64_t n) {
  double m = RowMax(x, n);
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return m + std::log(s);
}

}  // namespace loom::ir::ops
