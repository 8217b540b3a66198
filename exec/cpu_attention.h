#ifndef LOOM_EXEC_CPU_ATTENTION_H_
#define LOOM_EXEC_CPU_ATTENTION_H_

// Attention and its gradient on the CPU backend: per batch and query head, the
// score, weighting and gradient products through OpenBLAS, with the reference
// kernels' semantics (ir/ops/attention.cc): scaled dot products, causal masking,
// softmax, grouped kv heads. Computed in double in both precisions and rounded
// on store in fp32, as the reference does: the softmax gradient's rows sum to
// zero in exact arithmetic (the key bias gets no gradient), and float products
// would leave noise there far above float epsilon of the result.

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/host_tensor.h"

namespace loom::exec {

// q [b, s, hq, dk], k [b, t, hkv, dk], v [b, t, hkv, dv] -> out[0] [b, s, hq, dv]
// and out[1], each query row's log-sum-exp [b, s, hq]. Shapes are checked by the
// caller (shape inference).
absl::Status CpuAttention(absl::Span<const ir::HostTensor* const> in, const ir::AttrMap& attrs,
                          ir::DType precision, absl::Span<ir::HostTensor> out);

// q, k, v, the forward's out and log-sum-exp, dout and optionally the log-sum-exp's
// gradient -> dq, dk, dv.
absl::Status CpuAttentionGrad(absl::Span<const ir::HostTensor* const> in,
                              const ir::AttrMap& attrs, ir::DType precision,
                              absl::Span<ir::HostTensor> out);

}  // namespace loom::exec

#endif  // LOOM_EXEC_CPU_ATTENTION_H_
