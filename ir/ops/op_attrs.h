#ifndef LOOM_IR_OPS_OP_ATTRS_H_
#define LOOM_IR_OPS_OP_ATTRS_H_

// Attributes of ops whose kernels are written more than once (the reference
// kernels here, the executor's CPU and CUDA kernels), read and checked in one
// place so that every kernel accepts and refuses the same calls.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/shape.h"

namespace loom::ir::ops {

// adamw's attributes; every one is required, betas in [0, 1), step >= 1.
struct AdamWAttrs {
  double lr = 0.0;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  double weight_decay = 0.0;
  int64_t step = 1;
};
absl::StatusOr<AdamWAttrs> ParseAdamWAttrs(const AttrMap& attrs);

// The norms' `eps` (rms_norm, layer_norm and their gradients): 1e-5 when absent,
// non-negative.
absl::StatusOr<double> NormEps(const AttrMap& attrs);

// The sizes and attributes of one attention call: q [b, s, hq, dk], k [b, t, hkv,
// dk], v [b, t, hkv, dv] (the first three of `in`), causal (default 1), scale
// (default 1/sqrt(dk)) and the positions of the first query and the first key in
// the whole sequence, q_offset and k_offset (default 0: a piece of a longer
// attention, a chunk of the sequence under context parallelism, sets them), checked
// for consistency. Causal: query i sees key j where k_offset + j <= q_offset + i.
struct AttentionDims {
  int64_t batch = 0;
  int64_t s = 0;    // query positions
  int64_t t = 0;    // key positions
  int64_t hq = 0;   // query heads
  int64_t hkv = 0;  // key/value heads
  int64_t dk = 0;   // query/key head size
  int64_t dv = 0;   // value head size
  bool causal = true;
  double scale = 1.0;
  int64_t q_offset = 0;
  int64_t k_offset = 0;

  // Query heads sharing one kv head (grouped-query attention).
  int64_t group() const { return hq / hkv; }
  // The keys query i sees: keys 0 .. Visible(i) - 1 (every key unless causal).
  int64_t Visible(int64_t i) const {
    if (!causal) return t;
    const int64_t n = q_offset + i - k_offset + 1;
    return n < 0 ? 0 : (n > t ? t : n);
  }
  // (query, key) pairs attended: the sum of Visible(i) over the queries.
  double VisiblePairs() const;
};
absl::StatusOr<AttentionDims> GetAttentionDims(absl::Span<const TensorType> in,
                                               const AttrMap& attrs);

// The number mean(a) {dims, count?} divides its sum by: `count` where set (at least
// 1: a piece of a mean over a split dim divides by the whole op's count, a rank's
// local mean by its own), else the number of elements it reduces (the product of
// the dims of `input` that `dims` names). Checks `dims` as the reduction does.
absl::StatusOr<int64_t> MeanCount(const Shape& input, const AttrMap& attrs);

// Partial softmaxes of one row merged (attention_merge's numbers): from the largest
// log-sum-exp, the merged log-sum-exp L = log(sum_i exp(lses[i])), and in `weights`
// each part's exp(lses[i] - L), by which its value counts in the merged value. Parts
// that saw nothing (-inf) weigh 0; when all did, L is -inf and every weight 0.
double MergeLogSumExps(absl::Span<const double> lses, std::vector<double>* weights);

}  // namespace loom::ir::ops

#endif  // LOOM_IR_OPS_OP_ATTRS_H_
