#ifndef LOOM_EXEC_CUDA_SHAPE_KERNELS_H_
#define LOOM_EXEC_CUDA_SHAPE_KERNELS_H_

// Launchers of the shape ops: pure data movement (reshape, transpose, slice, concat,
// split, pad, expand). Plain C++ over DeviceTensor: no Abseil, no IR, so that the
// kernels compile under nvcc alone. shape_ops.cc reads the attributes and calls
// these.
//
// Every launcher enqueues its work on `stream` and returns the result of
// cudaGetLastError() after the last launch (cudaSuccess when there is nothing to
// do). All tensors of one call must share one element type (DeviceTensor::f64).
// Nothing is copied to or from the host.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// A per-dim integer (an origin, an extent, a permutation entry); entries at and
// beyond the rank are ignored.
struct RankArray {
  int64_t v[kMaxRank] = {};
};

// dst[i] = src[i] for every i < dst.size(): reshape. src.size() must equal
// dst.size().
cudaError_t LaunchFlatCopy(const DeviceTensor& src, const DeviceTensor& dst,
                           cudaStream_t stream);

// Copies the box of `extent` starting at `src_origin` in `src` to the box of the
// same extent starting at `dst_origin` in `dst`: slice, concat, split, pad,
// expand. src and dst have the same rank. A dim of size 1 in `src` is broadcast:
// every box position along it reads index 0 (its origin must be 0), which is how
// expand repeats its input. Positions of `dst` outside the box are left as they
// are.
cudaError_t LaunchCopyBox(const DeviceTensor& src, const RankArray& src_origin,
                          const DeviceTensor& dst, const RankArray& dst_origin,
                          const RankArray& extent, cudaStream_t stream);

// dst = src with dst dim i taken from src dim perm[i]: transpose. `perm` is a
// permutation of [0, src.rank), and dst.dims[i] == src.dims[perm[i]].
cudaError_t LaunchTranspose(const DeviceTensor& src, const RankArray& perm,
                            const DeviceTensor& dst, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_SHAPE_KERNELS_H_
