#ifndef LOOM_EXEC_CUDA_STRIDED_LAUNCH_CUH_
#define LOOM_EXEC_CUDA_STRIDED_LAUNCH_CUH_

// Launch geometry of the reduction, shape and optimizer kernels (reduce_kernels.cu,
// shape_kernels.cu, optimizer_kernels.cu): 256 threads per block, at most 65535
// blocks, grid-stride loops over the rest; and the row-major strides their index
// arithmetic walks. For .cu files only.

#include <algorithm>
#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda::strided {

inline constexpr int kThreads = 256;          // threads per block, a power of two
inline constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

inline int BlocksFor(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Row-major strides of `t`.
inline void RowMajorStrides(const DeviceTensor& t, int64_t* strides) {
  int64_t s = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= t.dims[d];
  }
}

}  // namespace loom::exec::cuda::strided

#endif  // LOOM_EXEC_CUDA_STRIDED_LAUNCH_CUH_
