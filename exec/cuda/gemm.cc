#include "exec/cuda/gemm.h"

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "exec/cuda/cuda_ops.h"

namespace loom::exec::cuda {

absl::Status Gemm(const OpContext& ctx, bool f64, bool ta, bool tb, int64_t m, int64_t n,
                  int64_t k, double alpha, const void* a, int64_t lda, int64_t stride_a,
                  const void* b, int64_t ldb, int64_t stride_b, double beta, void* c, int64_t ldc,
                  int64_t stride_c, int64_t count) {
  // Empty products: the outputs are already zero (or kept, with beta 1).
  if (m == 0 || n == 0 || k == 0 || count == 0) return absl::OkStatus();
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s;
  if (f64) {
    s = cublasDgemmStridedBatched(ctx.blas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                  static_cast<int>(k), &alpha, static_cast<const double*>(b),
                                  static_cast<int>(ldb), stride_b, static_cast<const double*>(a),
                                  static_cast<int>(lda), stride_a, &beta, static_cast<double*>(c),
                                  static_cast<int>(ldc), stride_c, static_cast<int>(count));
  } else {
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    s = cublasSgemmStridedBatched(ctx.blas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                  static_cast<int>(k), &fa, static_cast<const float*>(b),
                                  static_cast<int>(ldb), stride_b, static_cast<const float*>(a),
                                  static_cast<int>(lda), stride_a, &fb, static_cast<float*>(c),
                                  static_cast<int>(ldc), stride_c, static_cast<int>(count));
  }
  return CublasError(s, "gemm");
}

}  // namespace loom::exec::cuda
