#ifndef LOOM_EXEC_CUDA_INDEX_KERNELS_H_
#define LOOM_EXEC_CUDA_INDEX_KERNELS_H_

// Launchers of the index ops: arange, cumsum and index. Kept free of Abseil and of
// the IR so that nvcc only sees CUDA headers.
//
// Semantics are the reference kernels' (ir/ops/index.cc): every element is computed
// in double and rounded once on store in fp32 runs. Integers are held as exact values
// of the run's element type, as the reference holds them. Launchers enqueue on
// `stream` and return cudaGetLastError() after the launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

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

#endif  // LOOM_EXEC_CUDA_INDEX_KERNELS_H_
