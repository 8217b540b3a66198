#ifndef LOOM_EXEC_CUDA_LOSS_KERNELS_H_
#define LOOM_EXEC_CUDA_LOSS_KERNELS_H_

// Launchers of the loss pieces: cross entropy with its gradient, and pick with its
// gradient, over rows of the last dim. The formulas, attribute meanings and edge
// cases are the reference kernels' (ir/ops/loss.cc). Kept free of Abseil and of the
// IR so that nvcc only sees CUDA headers.
//
// The launchers follow the row-wise contracts of row_kernels.cuh: one element type
// per call, outputs arrive zero-filled, work goes on `stream` unsynchronised, sums in
// double rounded once on store and reduced in a fixed order, and the result is the
// first failing launch or scratch allocation (cudaSuccess otherwise).
// Where the reference rejects a target it can only see at run time, the kernel
// cannot report it: such a row or position is skipped and its output stays zero.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"
#include "exec/cuda/vocab.h"

namespace loom::exec::cuda {

// loss (a scalar) = sum over positions of logsumexp(logits) - logits[target], divided
// by `count` (>= 1). logits [..., V]; targets [...]. A target that is not an integer
// in [0, V) adds nothing.
cudaError_t LaunchCrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets,
                               int64_t count, const DeviceTensor& loss, cudaStream_t stream);

// dlogits = (softmax(logits) - onehot(target)) * dloss / count, dloss a scalar tensor
// read on the device. A row whose target is not an integer in [0, V) stays zero.
cudaError_t LaunchCrossEntropyGrad(const DeviceTensor& logits, const DeviceTensor& targets,
                                   const DeviceTensor& dloss, int64_t count,
                                   const DeviceTensor& dlogits, cudaStream_t stream);

// y[...] = x[..., target - vocab_begin] when that falls in [0, V), else 0. With
// kNoVocabBegin the offset is 0 and the target must be an integer in [0, V) (the
// reference's error; here the position stays zero). x [..., V]; targets, y [...].
cudaError_t LaunchPick(const DeviceTensor& x, const DeviceTensor& targets, int64_t vocab_begin,
                       const DeviceTensor& y, cudaStream_t stream);

// dx[..., target - vocab_begin] = dy[...] when that falls in [0, vocab), vocab being
// dx's last dim; the rest of dx stays zero. Out-of-range targets follow LaunchPick.
cudaError_t LaunchPickGrad(const DeviceTensor& targets, const DeviceTensor& dy, int64_t vocab_begin,
                           const DeviceTensor& dx, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_LOSS_KERNELS_H_
