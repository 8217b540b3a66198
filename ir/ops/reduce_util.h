#ifndef LOOM_IR_OPS_REDUCE_UTIL_H_
#define LOOM_IR_OPS_REDUCE_UTIL_H_

// Row helpers and FLOP counts shared by the reductions (reduce.cc) and the losses
// (loss.cc). Internal to ir/ops/.

#include <cstdint>

#include "absl/types/span.h"
#include "ir/op_schema.h"
#include "ir/ops/op_util.h"

namespace loom::ir::ops {

// Product of every dim but the last: the number of rows of a last-dim op.
int64_t Rows(const Shape& shape);
// Largest of x[0..n); -infinity for an empty row.
double RowMax(const double* x, int64_t n);
// log(sum(exp(x))) over one row, shifted by the row max for stability.
double LogSumExp(const double* x, int64_t n);

// FLOPs = elements of input 0 times `kPerElement`.
template <int kPerElement>
double FlopsPerInput(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                     const AttrMap&) {
  return ElementCount(in[0]) * kPerElement;
}

// FLOPs = elements of output 0 times `kPerElement`.
template <int kPerElement>
double Flops(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, kPerElement);
}

}  // namespace loom::ir::ops

#endif  // LOOM_IR_OPS_REDUCE_UTIL_H_
