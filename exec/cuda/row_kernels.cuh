#ifndef LOOM_EXEC_CUDA_ROW_KERNELS_CUH_
#define LOOM_EXEC_CUDA_ROW_KERNELS_CUH_

// Helpers of the kernels that work row by row over the last dim: the norms
// (norm_kernels.cu), the softmaxes (reduce_kernels.cu), the losses (loss_kernels.cu)
// and the embedding lookup (matmul_kernels.cu). For .cu files only.
//
// Layout: one block per row of the last dim (a grid-stride loop over rows when there
// are more rows than blocks), each thread striding over the row, block reductions in
// double through warp shuffles and 32 doubles of shared memory. Sums over rows
// (dgamma, dbeta, the loss, embedding rows) use a second, fixed-order pass over
// scratch memory instead of atomics, so every result is deterministic.
//
// Contracts shared by the launchers built on these helpers:
//  - All tensors of one call have the same element type (DeviceTensor::f64) and the
//    shapes shape inference gives the op; outputs arrive zero-filled.
//  - Work goes on `stream`; nothing synchronises it. Launchers that need scratch memory
//    take it from the stream-ordered allocator (cudaMallocAsync) and free it on the
//    same stream.
//  - Sums are accumulated in double whatever the element type and rounded once on
//    store, as the reference computes in double and rounds stored values. Sums over
//    rows (parameter gradients, the loss) are reduced in a fixed order, so results
//    are deterministic run to run.
//  - The result is the first non-success code of the launches (cudaGetLastError()
//    after each) or of the scratch allocation, cudaSuccess otherwise.
//  - Where the reference rejects a value it can only see at run time (a target or id
//    outside the vocabulary, a non-integer id), the kernel cannot report it: such a
//    row or position is skipped and its output stays zero. The error is the
//    reference's only.

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda::rows {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kWarp = 32;
inline constexpr int kMaxRowThreads = 512;               // threads of a per-row block
inline constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // more work loops inside the kernel
inline constexpr int kPointThreads = 256;  // threads of the one-thread-per-position kernels

// ---- host helpers -------------------------------------------------------------

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows and row length of a [..., n] tensor (a scalar is one row of one element).
struct RowShape {
  int64_t rows = 1;
  int64_t n = 1;
};

inline RowShape RowsOf(const DeviceTensor& t) {
  if (t.rank == 0) return RowShape{};
  return RowShape{t.Product(0, t.rank - 1), t.dims[t.rank - 1]};
}

// Threads of a per-row block: a power of two covering `n` (a multiple of the warp
// size), at most kMaxRowThreads.
inline int RowThreads(int64_t n) {
  int threads = kWarp;
  while (threads < kMaxRowThreads && threads < n) threads *= 2;
  return threads;
}

// Blocks for `work` independent units, capped; kernels loop over the rest.
inline unsigned Blocks(int64_t work) {
  return static_cast<unsigned>(work < kMaxBlocks ? work : kMaxBlocks);
}

inline size_t AlignUp(size_t bytes) {
  constexpr size_t kAlign = 256;
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// Scratch memory from the stream-ordered allocator, carved into aligned pieces and
// freed on the same stream (after the kernels that use it, in stream order).
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch() { Free(); }
  // Allocates `bytes` (> 0) at once; pieces are then taken with Take.
  cudaError_t Allocate(size_t bytes) {
    return cudaMallocAsync(reinterpret_cast<void**>(&base_), bytes, stream_);
  }
  // The next `count` elements of type U, aligned. The caller sized Allocate for them.
  template <typename U>
  U* Take(size_t count) {
    U* p = reinterpret_cast<U*>(base_ + used_);
    used_ += AlignUp(count * sizeof(U));
    return p;
  }
  cudaError_t Free() {
    char* base = base_;
    base_ = nullptr;
    return base != nullptr ? cudaFreeAsync(base, stream_) : cudaSuccess;
  }

 private:
  cudaStream_t stream_;
  char* base_ = nullptr;
  size_t used_ = 0;
};

// The first failure of `launch` and freeing `scratch`.
inline cudaError_t FirstError(cudaError_t launch, StreamScratch& scratch) {
  cudaError_t freed = scratch.Free();
  return launch != cudaSuccess ? launch : freed;
}

// ---- device helpers -------------------------------------------------------------

__device__ __forceinline__ double MaxOf(double a, double b) {
  return a < b ? b : a;  // std::max(a, b): keeps `a` when either is NaN
}

// Sum (kMax false) or max (kMax true, NaN ignored as in the reference's RowMax) over
// a warp by butterfly: every lane ends with the same, bit-identical value.
template <bool kMax>
__device__ __forceinline__ double WarpReduce(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(kFullMask, v, o);
    v = kMax ? MaxOf(v, other) : v + other;
  }
  return v;
}

// WarpReduce over the block, returned to every thread. blockDim.x is a multiple of
// the warp size; `shared` holds 32 doubles. Safe to call back to back.
template <bool kMax>
__device__ double BlockReduce(double v, double* shared) {
  v = WarpReduce<kMax>(v);
  const int lane = threadIdx.x % kWarp;
  __syncthreads();  // readers of the previous reduction are done with `shared`
  if (lane == 0) shared[threadIdx.x / kWarp] = v;
  __syncthreads();
  const double identity = kMax ? -CUDART_INF : 0.0;
  v = lane < static_cast<int>(blockDim.x / kWarp) ? shared[lane] : identity;
  return WarpReduce<kMax>(v);
}

__device__ __forceinline__ double BlockSum(double v, double* shared) {
  return BlockReduce<false>(v, shared);
}

// The row max m of x[0, n) (-infinity for an empty row) and sum(exp(x - m)).
struct ExpSum {
  double max;
  double sum;
};

template <typename T>
__device__ ExpSum RowExpSum(const T* x, int64_t n, double* shared) {
  double m = -CUDART_INF;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = MaxOf(m, static_cast<double>(x[j]));
  m = BlockReduce<true>(m, shared);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp(static_cast<double>(x[j]) - m);
  return ExpSum{m, BlockSum(s, shared)};
}

// Class index of target `t` in a vocabulary of `v` entries: -1 unless t is an integer
// in [0, v) (the reference's Target check).
__device__ __forceinline__ int64_t ClassIndex(double t, int64_t v) {
  return t >= 0 && t < static_cast<double>(v) && t == floor(t) ? static_cast<int64_t>(t) : -1;
}

// ---- launch helpers ------------------------------------------------------------------

// Launches `kernel` with one block per row of `s`, and nothing for an empty tensor.
template <typename... Params, typename... Args>
cudaError_t RowLaunch(void (*kernel)(Params...), RowShape s, cudaStream_t stream, Args... args) {
  if (s.rows == 0 || s.n == 0) return cudaSuccess;
  kernel<<<Blocks(s.rows), RowThreads(s.n), 0, stream>>>(args...);
  return cudaGetLastError();
}

// launch(T{}) with T the element type of `t`.
template <typename Launch>
cudaError_t ByType(const DeviceTensor& t, Launch launch) {
  return t.f64 ? launch(double{}) : launch(float{});
}

}  // namespace loom::exec::cuda::rows

#endif  // LOOM_EXEC_CUDA_ROW_KERNELS_CUH_
