// Kernels of the loss pieces (loss_kernels.h), in the row layout of row_kernels.cuh.
// The loss sums its rows in a second, single-block pass over scratch memory.

#include "exec/cuda/loss_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/row_kernels.cuh"

namespace loom::exec::cuda {
namespace {

constexpr int kReduceThreads = 1024;              // threads of a single-block reduction

// log(sum(exp(x))) over one row, shifted by the row max (reference LogSumExp).
template <typename T>
__device__ double RowLogSumExp(const T* x, int64_t n, double* shared) {
  const rows::ExpSum e = rows::RowExpSum(x, n, shared);
  return e.max + log(e.sum);
}

// Column of target `t` in a piece of `v` entries starting at `vocab_begin`, or -1
// (reference KernelPick / KernelPickGrad).
__device__ __forceinline__ int64_t PickColumn(double t, int64_t v, int64_t vocab_begin) {
  if (vocab_begin == kNoVocabBegin) return rows::ClassIndex(t, v);
  const double local = t - static_cast<double>(vocab_begin);
  return local >= 0 && local < static_cast<double>(v) ? static_cast<int64_t>(local) : -1;
}

// ---- loss kernels ----------------------------------------------------------------

// row_loss[r] = logsumexp(logits[r]) - logits[r, target], 0 for an invalid target.
template <typename T>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    CrossEntropyRowKernel(const T* logits, const T* targets, int64_t rows, int64_t v,
                          double* row_loss) {
  __shared__ double shared[rows::kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // The same in every thread.
    const int64_t t = rows::ClassIndex(static_cast<double>(targets[r]), v);
    if (t < 0) {
      if (threadIdx.x == 0) row_loss[r] = 0.0;
      continue;
    }
    const T* row = logits + r * v;
    const double lse = RowLogSumExp(row, v, shared);
    if (threadIdx.x == 0) row_loss[r] = lse - static_cast<double>(row[t]);
  }
}

// loss[0] = sum of row_loss / count; a single block.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    CrossEntropyTotalKernel(const double* row_loss, int64_t rows, int64_t count, T* loss) {
  __shared__ double shared[rows::kWarp];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  sum = rows::BlockSum(sum, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(sum / static_cast<double>(count));
}

// dlogits = (softmax(logits) - onehot(target)) * dloss / count; invalid-target rows
// stay zero.
template <typename T>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    CrossEntropyGradKernel(const T* logits, const T* targets, const T* dloss, int64_t rows,
                           int64_t v, int64_t count, T* dlogits) {
  __shared__ double shared[rows::kWarp];
  const double scale = static_cast<double>(dloss[0]) / static_cast<double>(count);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = rows::ClassIndex(static_cast<double>(targets[r]), v);
    if (t < 0) continue;
    const T* row = logits + r * v;
    const double lse = RowLogSumExp(row, v, shared);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const double p = exp(static_cast<double>(row[j]) - lse);
      dlogits[r * v + j] = static_cast<T>((p - (j == t ? 1.0 : 0.0)) * scale);
    }
  }
}

// With col the target's column in this piece, when there is one: pick copies
// src = x [rows, v] at [p, col] to dst = y [rows]; pick_grad (kGrad) copies src = dy
// [rows] to dst = dx [rows, v] at [p, col].
template <typename T, bool kGrad>
__global__ void PickKernel(const T* src, const T* targets, int64_t rows, int64_t v,
                           int64_t vocab_begin, T* dst) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < rows;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = PickColumn(static_cast<double>(targets[p]), v, vocab_begin);
    if (col >= 0) dst[kGrad ? p * v + col : p] = src[kGrad ? p : p * v + col];
  }
}

template <typename T>
cudaError_t CrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets, int64_t count,
                         const DeviceTensor& loss, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(logits);
  if (s.rows == 0) return cudaSuccess;  // 0 / count: the zero-filled output
  rows::StreamScratch scratch(stream);
  cudaError_t err = scratch.Allocate(rows::AlignUp(s.rows * sizeof(double)));
  if (err != cudaSuccess) return err;
  double* row_loss = scratch.Take<double>(s.rows);
  CrossEntropyRowKernel<T><<<rows::Blocks(s.rows), rows::RowThreads(s.n), 0, stream>>>(
      logits.as<T>(), targets.as<T>(), s.rows, s.n, row_loss);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    CrossEntropyTotalKernel<T>
        <<<1, kReduceThreads, 0, stream>>>(row_loss, s.rows, count, loss.as<T>());
    err = cudaGetLastError();
  }
  return rows::FirstError(err, scratch);
}

// pick (kGrad false) and pick_grad over `s`, the rows of x or dx.
template <typename T, bool kGrad>
cudaError_t Pick(const DeviceTensor& src, const DeviceTensor& targets, int64_t vocab_begin,
                 const DeviceTensor& dst, rows::RowShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.n == 0) return cudaSuccess;
  const unsigned blocks = rows::Blocks(rows::CeilDiv(s.rows, rows::kPointThreads));
  PickKernel<T, kGrad><<<blocks, rows::kPointThreads, 0, stream>>>(
      src.as<T>(), targets.as<T>(), s.rows, s.n, vocab_begin, dst.as<T>());
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets,
                               int64_t count, const DeviceTensor& loss, cudaStream_t stream) {
  return rows::ByType(logits, [&](auto t) {
    return CrossEntropy<decltype(t)>(logits, targets, count, loss, stream);
  });
}

cudaError_t LaunchCrossEntropyGrad(const DeviceTensor& logits, const DeviceTensor& targets,
                                   const DeviceTensor& dloss, int64_t count,
                                   const DeviceTensor& dlogits, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(logits);
  return rows::ByType(logits, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(CrossEntropyGradKernel<T>, s, stream, logits.as<T>(),
                           targets.as<T>(), dloss.as<T>(), s.rows, s.n, count, dlogits.as<T>());
  });
}

cudaError_t LaunchPick(const DeviceTensor& x, const DeviceTensor& targets, int64_t vocab_begin,
                       const DeviceTensor& y, cudaStream_t stream) {
  return rows::ByType(x, [&](auto t) {
    return Pick<decltype(t), false>(x, targets, vocab_begin, y, rows::RowsOf(x), stream);
  });
}

cudaError_t LaunchPickGrad(const DeviceTensor& targets, const DeviceTensor& dy, int64_t vocab_begin,
                           const DeviceTensor& dx, cudaStream_t stream) {
  return rows::ByType(dx, [&](auto t) {
    return Pick<decltype(t), true>(dy, targets, vocab_begin, dx, rows::RowsOf(dx), stream);
  });
}

}  // namespace loom::exec::cuda
