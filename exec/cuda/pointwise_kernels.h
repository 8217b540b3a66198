#ifndef LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_
#define LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_

// Launchers for the CUDA backend's pointwise kernels beyond elementwise_kernels.h:
// the broadcasting arithmetic, comparisons, logic and selection, the unary
// functions PyTorch programs use with their gradients, casts, and the index ops
// (arange, cumsum, index). Kept free of Abseil and of the IR so that nvcc only
// sees CUDA headers.
//
// Semantics are the reference kernels' (ir/ops/pointwise.cc, ir/ops/elementwise.cc,
// ir/ops/index_ops.cc): every element is computed in double and rounded once on
// store in fp32 runs. Booleans and integers are held as exact values of the
// run's element type (0 or 1 for booleans), as the reference holds them.
// Launchers enqueue on `stream` and return cudaGetLastError() after the launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// Inputs broadcast to the output (NumPy's rule, dims aligned at the last one):
// out[e] = f(a[src_a(e)], b[src_b(e)]) (or f(c, a, b) for kWhere, three inputs).
enum class BroadcastFn {
  kAdd, kSub, kMul, kDiv,          // a + b, a - b, a * b, a / b
  kEq, kNe, kLt, kLe, kGt, kGe,    // 1 or 0
  kAnd, kOr,                       // (a != 0) and/or (b != 0)
  kWhere,                          // c != 0 ? a : b
};
cudaError_t LaunchBroadcast(BroadcastFn fn, const DeviceTensor* inputs, int num_inputs,
                            const DeviceTensor& out, cudaStream_t stream);

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

// out[i] = start + i * step.
cudaError_t LaunchArange(double start, double step, const DeviceTensor& out, cudaStream_t stream);

// Running sums along the middle dim of x seen as [outer, n, inner], in order.
cudaError_t LaunchCumsum(const DeviceTensor& x, int64_t outer, int64_t n, int64_t inner,
                         const DeviceTensor& out, cudaStream_t stream);

// index(x, i0, ..., i{k-1}): the k index tensors broadcast to the output's first
// dims P and address x's first k dims (negative ids count from the end); the
// rest of each output row copies x's other dims. Synchronises `stream`. When an
// id is out of range or not an integer, *bad_dim is its index tensor (else -1)
// and *bad_value the id.
cudaError_t LaunchIndex(const DeviceTensor& x, const DeviceTensor* ids, int k,
                        const DeviceTensor& out, cudaStream_t stream, int* bad_dim,
                        double* bad_value);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_POINTWISE_KERNELS_H_
