#ifndef LOOM_EXEC_CUDA_MATMUL_KERNELS_H_
#define LOOM_EXEC_CUDA_MATMUL_KERNELS_H_

// The kernels of the matrix-product family: the element-wise part of linear (the
// products themselves are cuBLAS calls in matmul_ops.cc) and the embedding lookup
// with its gradient. Plain launchers: no Abseil, no IR.
//
// The embedding launchers follow the reference kernels (ir/ops/matmul.cc) and the
// row-wise contracts of row_kernels.cuh: one element type per call, outputs arrive
// zero-filled, work goes on `stream` unsynchronised, sums in double rounded once on
// store and reduced in a fixed order, the result is the first failing launch or
// scratch allocation, and an id the reference would reject leaves its position zero.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"
#include "exec/cuda/vocab.h"

namespace loom::exec::cuda {

// y[r, o] += bias[o] for r < rows, o < cols. `f64`: double elements, else float.
cudaError_t LaunchAddBias(void* y, const void* bias, int64_t rows, int64_t cols, bool f64,
                          cudaStream_t stream);

// out[p, :] = table[id_p - vocab_begin, :] for ids [...] and table [rows, d]; a
// position whose id falls outside the table (or, with kNoVocabBegin, is not an integer
// in [0, rows); with an offset, is not a non-negative integer) stays zero.
cudaError_t LaunchEmbedding(const DeviceTensor& ids, const DeviceTensor& table, int64_t vocab_begin,
                            const DeviceTensor& out, cudaStream_t stream);

// dtable[id_p - vocab_begin, :] += dy[p, :] over positions p, dtable [vocab, d]; ids are
// mapped as in LaunchEmbedding and positions without a row add nothing. Each row sums
// its positions in increasing order, in double. Needs fewer than 2^31 positions and
// table rows (cudaErrorInvalidValue otherwise).
cudaError_t LaunchEmbeddingGrad(const DeviceTensor& ids, const DeviceTensor& dy,
                                int64_t vocab_begin, const DeviceTensor& dtable,
                                cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_MATMUL_KERNELS_H_
