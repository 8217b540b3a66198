#ifndef LOOM_EXEC_CUDA_ROUNDED_ARITH_CUH_
#define LOOM_EXEC_CUDA_ROUNDED_ARITH_CUH_

// Arithmetic in double, rounded to nearest, never fused: the _rn intrinsics keep
// nvcc from contracting sums and products into fused multiply-adds, which the
// reference kernels (ISO C++ on the host, no contraction) do not do either. Used by
// the elementwise kernels and rope. For .cu files only.

namespace loom::exec::cuda::rn {

__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }

}  // namespace loom::exec::cuda::rn

#endif  // LOOM_EXEC_CUDA_ROUNDED_ARITH_CUH_
