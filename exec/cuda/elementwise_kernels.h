#ifndef LOOM_EXEC_CUDA_ELEMENTWISE_KERNELS_H_
#define LOOM_EXEC_CUDA_ELEMENTWISE_KERNELS_H_

// Launchers for the CUDA backend's elementwise kernels: arithmetic, activations
// and their gradients, scalar-tensor products, gradient accumulation and constants.
// Kept free of Abseil and of the IR so that nvcc only sees CUDA headers. Inputs of
// add, sub and mul that broadcast go to LaunchBroadcast (broadcast_kernels.h).
//
// Semantics are the reference kernels' (ir/ops/elementwise.cc): every element is
// computed in double with the reference's operation order and no fused
// multiply-adds, and rounded once on store in fp32 runs, as the reference
// interpreter rounds each op's result.
//
// Every launcher dispatches on DeviceTensor::f64 (all tensors of one call share
// the element type), enqueues its work on `stream` and returns the result of
// cudaGetLastError() after the launch (cudaSuccess with nothing launched for an
// empty output). Shapes are the caller's to check: inputs and outputs of one
// call hold the same number of elements unless said otherwise, and outputs do
// not alias inputs except where said.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// One-input maps: out[i] = f(x[i]).
enum class UnaryFn {
  kNeg,       // -x
  kExp,       // exp(x)
  kLog,       // log(x)
  kRsqrt,     // 1 / sqrt(x)
  kGelu,      // tanh approximation
  kGeluExact,  // x Phi(x), with erf
  kSilu,      // x * sigmoid(x)
  kIdentity,  // x (stop_gradient)
};
cudaError_t LaunchUnary(UnaryFn fn, const DeviceTensor& x, const DeviceTensor& out,
                        cudaStream_t stream);

// Two-input maps: out[i] = f(a[i], b[i]).
enum class BinaryFn {
  kAdd,       // a + b
  kSub,       // a - b
  kMul,       // a * b
  kGeluGrad,  // a = x, b = dy: dy * gelu'(x)
  kGeluExactGrad,  // a = x, b = dy: dy * gelu_exact'(x)
  kSiluGrad,  // a = x, b = dy: dy * silu'(x)
  kSwiGlu,    // a = gate, b = up: silu(gate) * up
};
cudaError_t LaunchBinary(BinaryFn fn, const DeviceTensor& a, const DeviceTensor& b,
                         const DeviceTensor& out, cudaStream_t stream);

// out[i] = x[i] * factor.
cudaError_t LaunchScale(const DeviceTensor& x, double factor, const DeviceTensor& out,
                        cudaStream_t stream);

// out[i] = pow(x[i], exponent).
cudaError_t LaunchPow(const DeviceTensor& x, double exponent, const DeviceTensor& out,
                      cudaStream_t stream);

// Products with a scalar held on the device: `s` is a one-element tensor, read
// by the kernel (never copied to the host).
enum class ScalarFn {
  kMul,  // x * s
  kDiv,  // x / s
};
cudaError_t LaunchTensorScalar(ScalarFn fn, const DeviceTensor& x, const DeviceTensor& s,
                               const DeviceTensor& out, cudaStream_t stream);

// out[i] = ((0 + inputs[0][i]) + inputs[1][i]) + ..., summed in double in input
// order and rounded once in fp32 runs. Any number of inputs (at least one); fp32
// runs with many inputs borrow a stream-ordered double scratch buffer.
cudaError_t LaunchAccumulate(const DeviceTensor* inputs, int num_inputs, const DeviceTensor& out,
                             cudaStream_t stream);

// swiglu_grad(gate, up, dy): dgate = dy * up * silu'(gate), dup = dy * silu(gate).
cudaError_t LaunchSwiGluGrad(const DeviceTensor& gate, const DeviceTensor& up,
                             const DeviceTensor& dy, const DeviceTensor& dgate,
                             const DeviceTensor& dup, cudaStream_t stream);

// Every element of `out` becomes `value` (rounded to float in fp32 runs).
cudaError_t LaunchFill(const DeviceTensor& out, double value, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_ELEMENTWISE_KERNELS_H_
