// Pointwise kernels of the CUDA backend (pointwise_kernels.h). Each element is
// widened to double, computed with the reference kernels' formulas and stored in
// the element type. Sums, products and quotients go through the _rn
// intrinsics so that nvcc never contracts them into fused multiply-adds.

#include "exec/cuda/pointwise_kernels.h"

#include <algorithm>
#include <cstdint>

#include "exec/cuda/grid_stride.h"

namespace loom::exec::cuda {
namespace {

// ---- unary functions and their gradients ---------------------------------------------

template <typename T>
__global__ void MathKernel(MathFn fn, const T* x, T* out, int64_t n) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    const double v = static_cast<double>(x[i]);
    double r = v;
    switch (fn) {
      case MathFn::kSqrt: r = __dsqrt_rn(v); break;
      case MathFn::kSin: r = sin(v); break;
      case MathFn::kCos: r = cos(v); break;
      case MathFn::kTanh: r = tanh(v); break;
      case MathFn::kSigmoid: r = __ddiv_rn(1.0, __dadd_rn(1.0, exp(-v))); break;
      case MathFn::kRelu: r = v > 0 ? v : 0.0; break;
      case MathFn::kToBool: r = v != 0; break;
      case MathFn::kTrunc: r = trunc(v); break;
      case MathFn::kIdentity: break;
    }
    out[i] = static_cast<T>(r);
  }
}

template <typename T>
__global__ void PairGradKernel(PairGradFn fn, const T* at, const T* dy, T* out, int64_t n) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    const double a = static_cast<double>(at[i]);
    const double d = static_cast<double>(dy[i]);
    double r = 0;
    switch (fn) {
      case PairGradFn::kReluGrad: r = a > 0 ? d : 0.0; break;
      case PairGradFn::kSigmoidGrad: r = __dmul_rn(__dmul_rn(d, a), __dsub_rn(1.0, a)); break;
      case PairGradFn::kTanhGrad: r = __dmul_rn(d, __dsub_rn(1.0, __dmul_rn(a, a))); break;
    }
    out[i] = static_cast<T>(r);
  }
}

}  // namespace

cudaError_t LaunchMath(MathFn fn, const DeviceTensor& x, const DeviceTensor& out,
                       cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  if (out.f64) {
    MathKernel<double><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        fn, x.as<const double>(), out.as<double>(), n);
  } else {
    MathKernel<float><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        fn, x.as<const float>(), out.as<float>(), n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchPairGrad(PairGradFn fn, const DeviceTensor& at, const DeviceTensor& dy,
                           const DeviceTensor& out, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  if (out.f64) {
    PairGradKernel<double><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        fn, at.as<const double>(), dy.as<const double>(), out.as<double>(), n);
  } else {
    PairGradKernel<float><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        fn, at.as<const float>(), dy.as<const float>(), out.as<float>(), n);
  }
  return cudaGetLastError();
}

}  // namespace loom::exec::cuda
