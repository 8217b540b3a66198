#include <algorithm>
#include <numeric>

#include "tests/ir/op_samples.h"

namespace loom::ir::testing {
namespace {

// Distinct values at least 0.3 apart (shuffled), so max has no ties even after a
// finite-difference step.
void FillDistinct(HostTensor& v, std::mt19937_64& rng) {
  std::vector<int64_t> order(v.data.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_real_distribution<double> jitter(-0.05, 0.05);
  const double mid = static_cast<double>(order.size()) / 2.0;
  for (size_t i = 0; i < order.size(); ++i) {
    v.data[i] = (static_cast<double>(order[i]) - mid) * 0.4 + jitter(rng);
  }
}

}  // namespace

void AddReduceSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  std::vector<int64_t> dims = {RandomDim(rng, 2, 3), RandomDim(rng, 1, 3), RandomDim(rng, 2, 4)};
  TensorType t = F64(dims);
  TensorType matrix = F64({dims[0], dims[2]});
  TensorType scalar = F64({});
  auto distinct_first = [](int i, HostTensor& v, std::mt19937_64& r) {
    if (i == 0) {
      FillDistinct(v, r);
    } else {
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      for (double& x : v.data) x = dist(r);
    }
  };
  out.push_back({"outer_dims", OpKind::kSum, {t}, {{"dims", std::vector<int64_t>{0, -1}}}});
  out.push_back({"all_dims", OpKind::kSum, {t}, {{"dims", std::vector<int64_t>{2, 0, 1}}}});
  out.push_back({"no_dims", OpKind::kSum, {matrix}, {{"dims", std::vector<int64_t>{}}}});
  out.push_back({"middle_dim", OpKind::kMean, {t}, {{"dims", std::vector<int64_t>{1}}}});
  out.push_back({"all_dims", OpKind::kMean, {matrix}, {{"dims", std::vector<int64_t>{-1, 0}}}});
  out.push_back({"last_dim", OpKind::kMax, {t}, {{"dim", int64_t{-1}}}, distinct_first});
  out.push_back({"first_dim", OpKind::kMax, {matrix}, {{"dim", int64_t{0}}}, distinct_first});
  out.push_back({"middle_dim", OpKind::kMaxGrad, {t, F64({dims[0], dims[2]})},
                 {{"dim", int64_t{1}}}, distinct_first});
  out.push_back({"rank3", OpKind::kSumSquares, {t}});
  out.push_back({"rank3", OpKind::kSoftmax, {t}});
  out.push_back({"rank2", OpKind::kLogSoftmax, {matrix}});
  out.push_back({"pair", OpKind::kSoftmaxGrad, {t, t}});
  out.push_back({"pair", OpKind::kLogSoftmaxGrad, {matrix, matrix}});

  const int64_t vocab = RandomDim(rng, 3, 5);
  TensorType logits = F64({dims[0], dims[1], vocab});
  TensorType targets = I64({dims[0], dims[1]});
  out.push_back({"tokens", OpKind::kCrossEntropy, {logits, targets}, {}, nullptr, vocab});
  out.push_back({"flat", OpKind::kCrossEntropy, {F64({dims[2], vocab}), I64({dims[2]})}, {},
                 nullptr, vocab});
  out.push_back({"tokens", OpKind::kCrossEntropyGrad, {logits, targets, scalar}, {}, nullptr,
                 vocab});
  out.push_back({"tokens", OpKind::kPick, {logits, targets}, {}, nullptr, vocab});
  // A vocabulary piece [1, 1 + vocab) of a vocabulary of vocab + 2 entries: targets
  // drawn from [0, vocab + 2) fall inside the piece, before it and after it.
  out.push_back({"vocab_piece", OpKind::kPick, {logits, targets}, {{"vocab_begin", int64_t{1}}},
                 nullptr, vocab + 2});
  out.push_back({"tokens", OpKind::kPickGrad, {targets, F64({dims[0], dims[1]})},
                 {{"vocab", vocab}}, nullptr, vocab});
  out.push_back({"vocab_piece", OpKind::kPickGrad, {I64({dims[2]}), F64({dims[2]})},
                 {{"vocab", vocab}, {"vocab_begin", int64_t{1}}}, nullptr, vocab + 2});
  // A piece of a loss over more positions than it holds.
  const int64_t count = 2 * dims[0] * dims[1] + 1;
  out.push_back({"global_count",
                 OpKind::kCrossEntropy,
                 {logits, targets},
                 {{"count", count}},
                 nullptr,
                 vocab});
  out.push_back({"global_count",
                 OpKind::kCrossEntropyGrad,
                 {logits, targets, scalar},
                 {{"count", count}},
                 nullptr,
                 vocab});
}

}  // namespace loom::ir::testing
