#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddShapeSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t a = RandomDim(rng, 1, 3);
  const int64_t b = RandomDim(rng, 2, 4);
  const int64_t c = RandomDim(rng, 2, 3);
  TensorType t = F64({a, b, c});
  out.push_back({"merge_tail", OpKind::kReshape, {t}, {{"shape", std::vector<int64_t>{a, -1}}}});
  out.push_back({"split_head",
                 OpKind::kReshape,
                 {F64({a * b, c})},
                 {{"shape", std::vector<int64_t>{a, b, c}}}});
  out.push_back({"rotate", OpKind::kTranspose, {t}, {{"perm", std::vector<int64_t>{2, 0, 1}}}});
  out.push_back(
      {"three", OpKind::kConcat, {t, F64({a, 1, c}), F64({a, 2, c})}, {{"dim", int64_t{1}}}});
  out.push_back({"last_dim", OpKind::kConcat, {t, F64({a, b, 1})}, {{"dim", int64_t{-1}}}});
  out.push_back(
      {"middle", OpKind::kSlice, {t}, {{"dim", int64_t{1}}, {"begin", int64_t{1}}, {"end", b}}});
  out.push_back({"last_dim",
                 OpKind::kSplit,
                 {t},
                 {{"dim", int64_t{-1}}, {"sizes", std::vector<int64_t>{1, c - 1}}}});
  out.push_back({"three",
                 OpKind::kSplit,
                 {F64({a, 4})},
                 {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{1, 2, 1}}}});
  out.push_back({"both_sides",
                 OpKind::kPad,
                 {t},
                 {{"dim", int64_t{0}}, {"before", int64_t{1}}, {"after", int64_t{2}}}});
  out.push_back({"middle", OpKind::kExpand, {F64({a, 1, c})}, {{"dim", int64_t{1}}, {"size", b}}});
}

}  // namespace loom::ir::testing
