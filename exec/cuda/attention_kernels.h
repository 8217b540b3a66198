#ifndef LOOM_EXEC_CUDA_ATTENTION_KERNELS_H_
#define LOOM_EXEC_CUDA_ATTENTION_KERNELS_H_

// Launchers of the attention ops' kernels: the masked softmax and its gradient that
// attention and attention_grad run between their cuBLAS products (attention_ops.cc),
// and rotary position embedding. Kept free of Abseil and of the IR so that nvcc only
// sees CUDA headers.
//
// Semantics are the reference kernels' (ir/ops/attention.cc). Rope computes every
// element in double with the reference's operation order and no fused multiply-adds,
// and rounds once on store in fp32 runs. Every launcher enqueues its work on `stream`
// and returns the result of cudaGetLastError() after the launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// In place over `rows` rows of length `t`: row i of each group of `s` rows is
// the query at position i % s; with `causal`, entries j > i % s become 0 and the
// rest softmax(row) (computed in double), else softmax over the whole row.
cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                bool f64, cudaStream_t stream);

// In place: dp[r, j] = p[r, j] * (dp[r, j] - sum_j p[r, j] * dp[r, j]) (the
// softmax gradient), rows of length t, row sums in double.
cudaError_t LaunchSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t t, bool f64,
                                  cudaStream_t stream);

// Rotate-half rotary embedding of x [b, s, h, d] (d even) into out of the same
// shape: for i < d/2 the pair (x[..., i], x[..., i + d/2]) at position `pos`
// turns by the angle pos * theta^(-2i/d) (by its negative when `inverse`):
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin). Angles in double.
cudaError_t LaunchRope(const DeviceTensor& x, double theta, bool inverse, const DeviceTensor& out,
                       cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_ATTENTION_KERNELS_H_
