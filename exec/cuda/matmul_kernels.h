#ifndef LOOM_EXEC_CUDA_MATMUL_KERNELS_H_
#define LOOM_EXEC_CUDA_MATMUL_KERNELS_H_

// The element-wise parts of the matrix-product ops (the products themselves
// are cuBLAS calls in matmul_ops.cc). Plain launchers: no Abseil, no IR.

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::exec::cuda {

// y[r, o] += bias[o] for r < rows, o < cols. `f64`: double elements, else float.
cudaError_t LaunchAddBias(void* y, const void* bias, int64_t rows, int64_t cols, bool f64,
                          cudaStream_t stream);

// In place over `rows` rows of length `t`: row i of each group of `s` rows is
// the query at position i % s; with `causal`, entries j > i % s become 0 and the
// rest softmax(row) (computed in double), else softmax over the whole row.
cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                bool f64, cudaStream_t stream);

// In place: dp[r, j] = p[r, j] * (dp[r, j] - sum_j p[r, j] * dp[r, j]) (the
// softmax gradient), rows of length t, row sums in double.
cudaError_t LaunchSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t t, bool f64,
                                  cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_MATMUL_KERNELS_H_
