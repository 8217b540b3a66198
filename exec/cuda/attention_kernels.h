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

// In place over `rows` rows of length `t`: row r of each group of `s` rows is the
// query at position i = r % s of head r / s; with `causal`, entries j > i + shift
// become 0 and the rest softmax(row) (computed in double), else softmax over the
// whole row. With `lse` set, each row's log-sum-exp goes to lse[i * lse_stride +
// r / s] (-inf for a row with nothing visible).
cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                int64_t shift, void* lse, int64_t lse_stride, bool f64,
                                cudaStream_t stream);

// In place, rows as above: p holds scores and becomes P = exp(score - lse) on the
// visible keys, dp holds dO V^T and becomes dS = P * (dp - rowsum(dout * out) +
// dlse), where lse, dlse (null: 0), out and dout point at the group's first head of
// query 0 ([s, hq] and [s, hq, dv] strides). Row sums in double.
cudaError_t LaunchFlashSoftmaxBackward(void* p, void* dp, int64_t rows, int64_t s, int64_t t,
                                       bool causal, int64_t shift, const void* lse,
                                       const void* dlse, const void* out, const void* dout,
                                       int64_t hq, int64_t dv, bool f64, cudaStream_t stream);

// Rotate-half rotary embedding of x [b, s, h, d] (d even) into out of the same
// shape: for i < d/2 the pair (x[..., i], x[..., i + d/2]) at position offset +
// `pos` turns by that position times theta^(-2i/d) (its negative when `inverse`):
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin). Angles in double.
cudaError_t LaunchRope(const DeviceTensor& x, double theta, bool inverse, int64_t offset,
                       const DeviceTensor& out, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_ATTENTION_KERNELS_H_
