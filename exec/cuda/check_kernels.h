#ifndef LOOM_EXEC_CUDA_CHECK_KERNELS_H_
#define LOOM_EXEC_CUDA_CHECK_KERNELS_H_

// Checks of integer operands (targets, ids) that the reference kernels reject,
// so that the GPU refuses the same inputs instead of computing around them.
// Plain launchers: no Abseil, no IR.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// The first position of `ids` (in row-major order) holding a value that is not a
// non-negative integer, or, when `upper` > 0, not below `upper`; -1 when there is
// none. Synchronises `stream`; `*value` receives the offending value.
cudaError_t FindBadIndex(const DeviceTensor& ids, int64_t upper, cudaStream_t stream,
                         int64_t* position, double* value);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_CHECK_KERNELS_H_
