#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddNormSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t d = RandomDim(rng, 3, 5);
  TensorType x = F64({RandomDim(rng, 1, 3), RandomDim(rng, 1, 3), d});
  TensorType rows = F64({RandomDim(rng, 2, 4), d});
  TensorType param = F64({d});
  out.push_back({"rank3", OpKind::kLayerNorm, {x, param, param}});
  out.push_back({"large_eps", OpKind::kLayerNorm, {rows, param, param}, {{"eps", 0.1}}});
  out.push_back({"rank3", OpKind::kRmsNorm, {x, param}});
  out.push_back({"large_eps", OpKind::kRmsNorm, {rows, param}, {{"eps", 0.1}}});
  out.push_back({"rank3", OpKind::kLayerNormGrad, {x, param, x}});
  out.push_back({"rank3", OpKind::kRmsNormGrad, {x, param, x}, {{"eps", 1e-6}}});
}

}  // namespace loom::ir::testing
