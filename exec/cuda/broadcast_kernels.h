#ifndef LOOM_EXEC_CUDA_BROADCAST_KERNELS_H_
#define LOOM_EXEC_CUDA_BROADCAST_KERNELS_H_

// Broadcasting maps of two or three inputs, launched by the elementwise family (add,
// sub and mul whose inputs broadcast) and the pointwise family (div, compare, logical,
// where), and the broadcast geometry the index kernels share. Kept free of Abseil and
// of the IR so that nvcc only sees CUDA headers.
//
// Semantics are the reference kernels' (ir/ops/elementwise.cc, ir/ops/pointwise.cc):
// every element is computed in double and rounded once on store in fp32 runs.
// Booleans are held as 0 or 1 of the run's element type, as the reference holds them.
// The launcher enqueues on `stream` and returns cudaGetLastError() after the launch.

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

// ---- geometry --------------------------------------------------------------------

inline constexpr int kMaxBroadcastInputs = 3;

// The output's dims and, per input, the stride of each output dim in that input
// (0 where the input is broadcast along it).
struct BroadcastGeom {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxBroadcastInputs][kMaxRank] = {};
};

// Strides of `in` aligned at the last dim of `dims` (rank `rank`).
inline void AlignedStrides(const DeviceTensor& in, const int64_t* dims, int rank,
                           int64_t* strides) {
  const int offset = rank - in.rank;
  for (int d = 0; d < rank; ++d) strides[d] = 0;
  int64_t s = 1;
  for (int d = in.rank - 1; d >= 0; --d) {
    if (in.dims[d] != 1 || dims[offset + d] == 1) strides[offset + d] = s;
    s *= in.dims[d];
  }
}

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_BROADCAST_KERNELS_H_
