#ifndef LOOM_EXEC_CUDA_ROWWISE_KERNELS_H_
#define LOOM_EXEC_CUDA_ROWWISE_KERNELS_H_

// Launchers for the row-wise ops: normalisations, softmaxes, the loss pieces and the
// embedding lookup. Each op works on rows over the last dim of its main input; the
// formulas, attribute meanings and edge cases are the reference kernels' (ir/ops/norm.cc,
// ir/ops/reduce.cc, ir/ops/loss.cc, ir/ops/matmul.cc).
//
// Contracts shared by every launcher:
//  - All tensors of one call have the same element type (DeviceTensor::f64) and the
//    shapes shape inference gives the op; outputs arrive zero-filled.
//  - Work goes on `stream`; nothing synchronises it. Launchers that need scratch memory
//    take it from the stream-ordered allocator (cudaMallocAsync) and free it on the
//    same stream.
//  - Sums are accumulated in double whatever the element type and rounded once on
//    store, as the reference computes in double and rounds stored values. Sums over
//    rows (parameter gradients, the loss) are reduced in a fixed order, so results
//    are deterministic run to run.
//  - The result is the first non-success code of the launches (cudaGetLastError()
//    after each) or of the scratch allocation, cudaSuccess otherwise.
//  - Where the reference rejects a value it can only see at run time (a target or id
//    outside the vocabulary, a non-integer id), the kernel cannot report it: such a
//    row or position is skipped and its output stays zero. The error is the
//    reference's only.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// `vocab_begin` value meaning "no vocab_begin attribute": the tensor holds the whole
// vocabulary. Valid offsets are non-negative.
inline constexpr int64_t kNoVocabBegin = -1;

// y = x / sqrt(mean(x^2) + eps) * gamma over the last dim. x, y [..., d]; gamma [d].
cudaError_t LaunchRmsNorm(const DeviceTensor& x, const DeviceTensor& gamma, double eps,
                          const DeviceTensor& y, cudaStream_t stream);

// With xhat = x * rstd and g = dy * gamma: dx = rstd * (g - xhat * mean(g * xhat)),
// dgamma = sum over rows of dy * xhat. x, dy, dx [..., d]; gamma, dgamma [d].
cudaError_t LaunchRmsNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                              const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                              const DeviceTensor& dgamma, cudaStream_t stream);

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim (biased variance).
cudaError_t LaunchLayerNorm(const DeviceTensor& x, const DeviceTensor& gamma,
                            const DeviceTensor& beta, double eps, const DeviceTensor& y,
                            cudaStream_t stream);

// With xhat the normalised row and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum dy * xhat,
// dbeta = sum dy (sums over rows).
cudaError_t LaunchLayerNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                                const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                                const DeviceTensor& dgamma, const DeviceTensor& dbeta,
                                cudaStream_t stream);

// y = exp(x - max) / sum(exp(x - max)) over the last dim.
cudaError_t LaunchSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream);

// y = x - logsumexp(x) over the last dim.
cudaError_t LaunchLogSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream);

// dx = y * (dy - sum_last(y * dy)), y the softmax output.
cudaError_t LaunchSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy, const DeviceTensor& dx,
                              cudaStream_t stream);

// dx = dy - exp(y) * sum_last(dy), y the log_softmax output.
cudaError_t LaunchLogSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy,
                                 const DeviceTensor& dx, cudaStream_t stream);

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

#endif  // LOOM_EXEC_CUDA_ROWWISE_KERNELS_H_
