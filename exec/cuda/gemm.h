#ifndef LOOM_EXEC_CUDA_GEMM_H_
#define LOOM_EXEC_CUDA_GEMM_H_

// Row-major matrix products through cuBLAS, for the matmul and attention families.

#include <cstdint>

#include "absl/status/status.h"
#include "exec/cuda/cuda_ops.h"

namespace loom::exec::cuda {

// Row-major C[m, n] = alpha op(A) op(B) + beta C, `count` times with the given
// element strides between the batch entries. cuBLAS is column-major: a row-major
// matrix is its transpose, so C^T = op(B)^T op(A)^T is computed instead.
// Empty products launch nothing: the outputs are already zero (or kept, with beta 1).
absl::Status Gemm(const OpContext& ctx, bool f64, bool ta, bool tb, int64_t m, int64_t n,
                  int64_t k, double alpha, const void* a, int64_t lda, int64_t stride_a,
                  const void* b, int64_t ldb, int64_t stride_b, double beta, void* c, int64_t ldc,
                  int64_t stride_c, int64_t count = 1);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_GEMM_H_
