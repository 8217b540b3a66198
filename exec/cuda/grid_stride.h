#ifndef LOOM_EXEC_CUDA_GRID_STRIDE_H_
#define LOOM_EXEC_CUDA_GRID_STRIDE_H_

// Launch geometry of the element-wise kernels (elementwise_kernels.cu,
// pointwise_kernels.cu, broadcast_kernels.cu, index_kernels.cu, and rope and the
// masked softmax in attention_kernels.cu): 256 threads per block and grid-stride
// loops, which cover any size. For .cu files only.

#include <algorithm>
#include <cstdint>

namespace loom::exec::cuda::grid {

inline constexpr int kThreads = 256;
// More blocks than this only adds scheduling.
inline constexpr int64_t kMaxBlocks = 8192;

// Blocks for n elements.
inline int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// This thread's first element and the step between its elements.
__device__ __forceinline__ int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace loom::exec::cuda::grid

#endif  // LOOM_EXEC_CUDA_GRID_STRIDE_H_
