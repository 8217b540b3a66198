#ifndef LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_
#define LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_

// Launchers for the CUDA backend's pointwise kernels: the unary functions PyTorch
// programs use with their gradients, and casts. Division, comparisons, logic and
// selection broadcast through LaunchBroadcast (broadcast_kernels.h). Kept free of
// Abseil and of the IR so that nvcc only sees CUDA headers.
//
// Semantics are the reference kernels' (ir/ops/pointwise.cc): every element is
// computed in double and rounded once on store in fp32 runs. Booleans and integers
// are held as exact values of the run's element type (0 or 1 for booleans), as the
// reference holds them.
// Launchers enqueue on `stream` and return cudaGetLastError() after the launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// One-input maps: out[i] = f(x[i]).
enum class MathFn {
  kSqrt, kSin, kCos, kTanh,
  kSigmoid,   // 1 / (1 + exp(-x))
  kRelu,      // x > 0 ? x : 0
  kToBool,    // x != 0
  kTrunc,     // toward zero (casts to integer types)
  kIdentity,  // casts between float types
};
cudaError_t LaunchMath(MathFn fn, const DeviceTensor& x, const DeviceTensor& out,
                       cudaStream_t stream);

// The unary functions' gradients, out[i] = f(at[i], dy[i]), `at` the function's
// input (relu) or output (sigmoid, tanh).
enum class PairGradFn {
  kReluGrad,     // x > 0 ? dy : 0
  kSigmoidGrad,  // dy y (1 - y)
  kTanhGrad,     // dy (1 - y^2)
};
cudaError_t LaunchPairGrad(PairGradFn fn, const DeviceTensor& at, const DeviceTensor& dy,
                           const DeviceTensor& out, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_
