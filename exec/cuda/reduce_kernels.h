#ifndef LOOM_EXEC_CUDA_REDUCE_SHAPE_KERNELS_H_
#define LOOM_EXEC_CUDA_REDUCE_SHAPE_KERNELS_H_

// Launchers of the reductions, the shape ops (pure data movement) and the
// optimizer updates. Plain C++ over DeviceTensor: no Abseil, no IR, so that the
// kernels compile under nvcc alone. reduce_shape_ops.cc reads the attributes and
// calls these.
//
// Every launcher enqueues its work on `stream` and returns the result of
// cudaGetLastError() after the last launch (cudaSuccess when there is nothing to
// do). All tensors of one call must share one element type (DeviceTensor::f64);
// values are computed in double and rounded to the element type on store, as the
// reference kernels compute. Nothing is copied to or from the host.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// A per-dim integer (an origin, an extent, a permutation entry); entries at and
// beyond the rank are ignored.
struct RankArray {
  int64_t v[kMaxRank] = {};
};

// ---- shape ops ------------------------------------------------------------------

// dst[i] = src[i] for every i < dst.size(): reshape. src.size() must equal
// dst.size().
cudaError_t LaunchFlatCopy(const DeviceTensor& src, const DeviceTensor& dst,
                           cudaStream_t stream);

// Copies the box of `extent` starting at `src_origin` in `src` to the box of the
// same extent starting at `dst_origin` in `dst`: slice, concat, split, pad,
// expand. src and dst have the same rank. A dim of size 1 in `src` is broadcast:
// every box position along it reads index 0 (its origin must be 0), which is how
// expand repeats its input. Positions of `dst` outside the box are left as they
// are.
cudaError_t LaunchCopyBox(const DeviceTensor& src, const RankArray& src_origin,
                          const DeviceTensor& dst, const RankArray& dst_origin,
                          const RankArray& extent, cudaStream_t stream);

// dst = src with dst dim i taken from src dim perm[i]: transpose. `perm` is a
// permutation of [0, src.rank), and dst.dims[i] == src.dims[perm[i]].
cudaError_t LaunchTranspose(const DeviceTensor& src, const RankArray& perm,
                            const DeviceTensor& dst, cudaStream_t stream);

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

// ---- optimizer updates ------------------------------------------------------------

// out = param - lr * (grad + weight_decay * param), elementwise.
cudaError_t LaunchSgd(const DeviceTensor& param, const DeviceTensor& grad, double lr,
                      double weight_decay, const DeviceTensor& out, cudaStream_t stream);

struct AdamWParams {
  double lr = 0.0;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based; the bias corrections are 1 - beta^step
};

// PyTorch's AdamW, elementwise over tensors of one shape:
//   m' = beta1 m + (1 - beta1) g,  v' = beta2 v + (1 - beta2) g g,
//   param' = param - lr wd param - lr (m' / c1) / (sqrt(v' / c2) + eps),
// with c1 = 1 - beta1^step and c2 = 1 - beta2^step.
cudaError_t LaunchAdamW(const DeviceTensor& param, const DeviceTensor& grad,
                        const DeviceTensor& m, const DeviceTensor& v, const AdamWParams& p,
                        const DeviceTensor& param_out, const DeviceTensor& m_out,
                        const DeviceTensor& v_out, cudaStream_t stream);

// out[0] = min(1, max_norm / (sqrt(total_sumsq[0]) + eps)); both are 1-element
// tensors, and total_sumsq is read on the device. A NaN quotient gives 1, as
// std::min(1.0, NaN) does.
cudaError_t LaunchClipCoef(const DeviceTensor& total_sumsq, double max_norm, double eps,
                           const DeviceTensor& out, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_REDUCE_SHAPE_KERNELS_H_
