#ifndef LOOM_EXEC_CUDA_REDUCE_KERNELS_H_
#define LOOM_EXEC_CUDA_REDUCE_KERNELS_H_

// Launchers of the reductions: sums, means and sums of squares over a set of dims,
// max and its gradient along one dim, and the softmaxes with their gradients over
// the last dim. Plain C++ over DeviceTensor: no Abseil, no IR, so that the kernels
// compile under nvcc alone. reduce_ops.cc reads the attributes and calls these.
//
// Semantics are the reference kernels' (ir/ops/reduce.cc). All tensors of one call
// must share one element type (DeviceTensor::f64); values are computed in double and
// rounded to the element type on store, as the reference kernels compute. Nothing is
// copied to or from the host. Every launcher enqueues its work on `stream` and returns
// the result of cudaGetLastError() after the last launch (cudaSuccess when there is
// nothing to do). The softmaxes work in the row layout of row_kernels.cuh.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// ---- reductions -----------------------------------------------------------------

enum class ReduceKind {
  kSum,         // sum of the reduced elements
  kMean,        // that sum divided by the number of reduced elements
  kSumSquares,  // sum of the squares of the reduced elements
};

// Reduces `src` over the dims whose bit is set in `reduced_dims` (bit d for dim
// d); `dst` holds the remaining dims in order (rank 0 when every dim is
// reduced). Sums accumulate in double. While the innermost dim is kept, or the
// reduction is shorter than a few thousand elements, each output element sums its
// inputs in row-major order, exactly as the reference does; longer reductions
// over the innermost dim are split across a block and combined in a fixed tree
// order (deterministic, but rounded in a different order). A mean divides by
// `mean_count` (ir::ops::MeanCount; the others ignore it); a mean over zero
// elements is 0/0 (NaN), as in the reference.
cudaError_t LaunchReduce(ReduceKind kind, const DeviceTensor& src, uint32_t reduced_dims,
                         int64_t mean_count, const DeviceTensor& dst, cudaStream_t stream);

// dst = the largest value of `src` along `dim` (dim removed). Sequential
// semantics: the running maximum starts at the first element and is replaced
// only by a strictly greater one, so a NaN wins only in first position.
// src.dims[dim] must be at least 1.
cudaError_t LaunchMax(const DeviceTensor& src, int dim, const DeviceTensor& dst,
                      cudaStream_t stream);

// da[..., k, ...] = dy[...] at the first argmax k of `a` along `dim` (the
// position LaunchMax's value comes from); other positions of `da` are not
// written, so `da` must arrive zero-filled. dy has the dims of `a` without
// `dim`; da has the dims of `a`.
cudaError_t LaunchMaxGrad(const DeviceTensor& a, const DeviceTensor& dy, int dim,
                          const DeviceTensor& da, cudaStream_t stream);

// ---- softmaxes ----------------------------------------------------------------

// y = exp(x - max) / sum(exp(x - max)) over the last dim.
cudaError_t LaunchSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream);

// y = x - logsumexp(x) over the last dim.
cudaError_t LaunchLogSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream);

// dx = y * (dy - sum_last(y * dy)), y the softmax output.
cudaError_t LaunchSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy, const DeviceTensor& dx,
                              cudaStream_t stream);

// dx = dy - exp(y) * sum_last(dy), y the log_softmax output.
cudaError_t LaunchLogSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy,
                                 const DeviceTensor& dx, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_REDUCE_KERNELS_H_
