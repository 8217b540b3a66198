#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddAttentionSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t batch = RandomDim(rng, 1, 2);
  const int64_t s = RandomDim(rng, 2, 3);
  const int64_t dk = RandomDim(rng, 2, 3);
  const int64_t dv = RandomDim(rng, 1, 3);
  // Causal, grouped-query: 4 query heads over 2 kv heads.
  TensorType q = F64({batch, s, 4, dk});
  TensorType k = F64({batch, s, 2, dk});
  TensorType v = F64({batch, s, 2, dv});
  TensorType o = F64({batch, s, 4, dv});
  TensorType lse = F64({batch, s, 4});
  out.push_back({"causal_gqa", OpKind::kAttention, {q, k, v}});
  out.push_back({"causal_gqa", OpKind::kAttentionGrad, {q, k, v, o, lse, o}});
  out.push_back({"lse_read", OpKind::kAttentionGrad, {q, k, v, o, lse, o, lse}});
  // A block of queries after a chunk of keys (context parallelism's pieces).
  AttrMap placed{{"q_offset", int64_t{s}}, {"k_offset", int64_t{1}}};
  out.push_back({"placed", OpKind::kAttention, {q, k, v}, placed});
  out.push_back({"placed", OpKind::kAttentionGrad, {q, k, v, o, lse, o}, placed});
  out.push_back({"merge", OpKind::kAttentionMerge, {o, lse, o, lse}});
  // Non-causal with more keys than queries, one kv head, an explicit scale.
  const int64_t t = s + 1;
  TensorType q2 = F64({batch, s, 2, dk});
  TensorType k2 = F64({batch, t, 1, dk});
  TensorType v2 = F64({batch, t, 1, dv});
  AttrMap cross{{"causal", int64_t{0}}, {"scale", 0.7}};
  out.push_back({"cross_mqa", OpKind::kAttention, {q2, k2, v2}, cross});
  TensorType o2 = F64({batch, s, 2, dv});
  out.push_back(
      {"cross_mqa", OpKind::kAttentionGrad, {q2, k2, v2, o2, F64({batch, s, 2}), o2}, cross});

  TensorType x = F64({batch, RandomDim(rng, 2, 4), 2, 2 * RandomDim(rng, 1, 2)});
  out.push_back({"default", OpKind::kRope, {x}});
  out.push_back({"inverse", OpKind::kRope, {x}, {{"theta", 50.0}, {"inverse", int64_t{1}}}});
  out.push_back({"offset", OpKind::kRope, {x}, {{"offset", int64_t{5}}}});
}

}  // namespace loom::ir::testing
