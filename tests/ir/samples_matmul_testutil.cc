#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddMatMulSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t batch = RandomDim(rng, 1, 3);
  const int64_t m = RandomDim(rng, 1, 3);
  const int64_t k = RandomDim(rng, 2, 4);
  const int64_t n = RandomDim(rng, 1, 3);
  out.push_back({"batched", OpKind::kMatMul, {F64({batch, m, k}), F64({batch, k, n})}});
  out.push_back({"shared_rhs", OpKind::kMatMul, {F64({batch, 2, m, k}), F64({k, n})}});
  out.push_back({"rank2", OpKind::kMatMul, {F64({m, k}), F64({k, n})}});

  const int64_t in = RandomDim(rng, 2, 4);
  const int64_t features = RandomDim(rng, 1, 3);
  out.push_back(
      {"bias", OpKind::kLinear, {F64({batch, m, in}), F64({features, in}), F64({features})}});
  out.push_back({"no_bias", OpKind::kLinear, {F64({n, in}), F64({features, in})}});
  out.push_back({"rank3", OpKind::kLinearWGrad, {F64({batch, m, features}), F64({batch, m, in})}});

  const int64_t vocab = RandomDim(rng, 3, 5);
  const int64_t d = RandomDim(rng, 1, 3);
  out.push_back(
      {"tokens", OpKind::kEmbedding, {I64({batch, m}), F64({vocab, d})}, {}, nullptr, vocab});
  out.push_back({"tokens",
                 OpKind::kEmbeddingGrad,
                 {I64({batch, m}), F64({batch, m, d})},
                 {{"vocab", vocab}},
                 nullptr,
                 vocab});
  // A vocab piece holding ids [1, vocab + 1) while ids range over [0, vocab + 2).
  out.push_back({"vocab_piece",
                 OpKind::kEmbedding,
                 {I64({batch, m}), F64({vocab, d})},
                 {{"vocab_begin", int64_t{1}}},
                 nullptr,
                 vocab + 2});
  out.push_back({"vocab_piece",
                 OpKind::kEmbeddingGrad,
                 {I64({batch, m}), F64({batch, m, d})},
                 {{"vocab", vocab}, {"vocab_begin", int64_t{1}}},
                 nullptr,
                 vocab + 2});
}

}  // namespace loom::ir::testing
