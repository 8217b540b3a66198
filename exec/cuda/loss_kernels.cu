// Kernels of the loss pieces (loss_kernels.h), in the row layout of row_kernels.cuh.
// The loss sums its rows in a second, single-block pass over scratch memory.

#include "exec/cuda/loss_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/row_kernels.cuh"

namespace loom::exec::cuda {
namespace {

using rows::AlignUp;
using rows::Blocks;
using rows::BlockSum;
using rows::ByType;
using rows::CeilDiv;
using rows::ClassIndex;
using rows::ExpSum;
using rows::FirstError;
using rows::kMaxRowThreads;
using rows::kPointThreads;
using rows::kWarp;
using rows::RowExpSum;
using rows::RowLaunch;
using rows::RowShape;
using rows::RowsOf;
using rows::RowThreads;
using rows::StreamScratch;

constexpr int kReduceThreads = 1024;              // threads of a single-block reduction

// log(sum(exp(x))) over one row, shifted by the row max (reference LogSumExp).
template <typename T>
__device__ double RowLogSumExp(const T* x, int64_t n, double* shared) {
  const ExpSum e = RowExpSum(x, n, shared);
  return e.max + log(e.sum);
}

// Column of target `t` in a piece of `v` entries starting at `vocab_begin`, or -1
// (reference KernelPick / KernelPickGrad).
__device__ __forceinline__ int64_t PickColumn(double t, int64_t v, int64_t vocab_begin) {
  if (vocab_begin == kNoVocabBegin) return ClassIndex(t, v);
  const double local = t - static_cast<double>(vocab_begin);
  return local >= 0 && local < static_cast<double>(v) ? static_cast<int64_t>(local) : -1;
}

// ---- loss kernels ----------------------------------------------------------------

// row_loss[r] = logsumexp(logits[r]) - logits[r, target], 0 for an invalid target.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyRowKernel(const T* logits, const T* targets, int64_t rows, int64_t v,
                          double* row_loss) {
  __shared__ double shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = ClassIndex(static_cast<double>(targets[r]), v);  // same in every thread
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
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(sum / static_cast<double>(count));
}

// dlogits = (softmax(logits) - onehot(target)) * dloss / count; invalid-target rows
// stay zero.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyGradKernel(const T* logits, const T* targets, const T* dloss, int64_t rows,
                           int64_t v, int64_t count, T* dlogits) {
  __shared__ double shared[kWarp];
  const double scale = static_cast<double>(dloss[0]) / static_cast<double>(count);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = ClassIndex(static_cast<double>(targets[r]), v);
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
  const RowShape s = RowsOf(logits);
  if (s.rows == 0) return cudaSuccess;  // 0 / count: the zero-filled output
  StreamScratch scratch(stream);
  cudaError_t err = scratch.Allocate(AlignUp(s.rows * sizeof(double)));
  if (err != cudaSuccess) return err;
  double* row_loss = scratch.Take<double>(s.rows);
  CrossEntropyRowKernel<T><<<Blocks(s.rows), RowThreads(s.n), 0, stream>>>(
      logits.as<T>(), targets.as<T>(), s.rows, s.n, row_loss);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    CrossEntropyTotalKernel<T>
        <<<1, kReduceThreads, 0, stream>>>(row_loss, s.rows, count, loss.as<T>());
    err = cudaGetLastError();
  }
  return FirstError(err, scratch);
}

// pick (kGrad false) and pick_grad over `s`, the rows of x or dx.
template <typename T, bool kGrad>
cudaError_t Pick(const DeviceTensor& src, const DeviceTensor& targets, int64_t vocab_begin,
                 const DeviceTensor& dst, RowShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.n == 0) return cudaSuccess;
  PickKernel<T, kGrad><<<Blocks(CeilDiv(s.rows, kPointThreads)), kPointThreads, 0, stream>>>(
      src.as<T>(), targets.as<T>(), s.rows, s.n, vocab_begin, dst.as<T>());
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchCrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets,
                               int64_t count, const DeviceTensor& loss, cudaStream_t stream) {
  return ByType(logits, [&](auto t) {
    return CrossEntropy<decltype(t)>(logits, targets, count, loss, stream);
  });
}

cudaError_t LaunchCrossEntropyGrad(const DeviceTensor& logits, const DeviceTensor& targets,
                                   const DeviceTensor& dloss, int64_t count,
                                   const DeviceTensor& dlogits, cudaStream_t stream) {
  const RowShape s = RowsOf(logits);
  return ByType(logits, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(CrossEntropyGradKernel<T>, s, stream, logits.as<T>(), targets.as<T>(),
                     dloss.as<T>(), s.rows, s.n, count, dlogits.as<T>());
  });
}

cudaError_t LaunchPick(const DeviceTensor& x, const DeviceTensor& targets, int64_t vocab_begin,
                       const DeviceTensor& y, cudaStream_t stream) {
  return ByType(x, [&](auto t) {
    return Pick<decltype(t), false>(x, targets, vocab_begin, y, RowsOf(x), stream);
  });
}

cudaError_t LaunchPickGrad(const DeviceTensor& targets, const DeviceTensor& dy, int64_t vocab_begin,
                           const DeviceTensor& dx, cudaStream_t stream) {
  return ByType(dx, [&](auto t) {
    return Pick<decltype(t), true>(dy, targets, vocab_begin, dx, RowsOf(dx), stream);
  });
}

}  // namespace loom::exec::cuda
