#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddOptimizerSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  std::vector<int64_t> dims = {RandomDim(rng, 1, 3), RandomDim(rng, 2, 4)};
  TensorType t = F64(dims);
  // Inputs 0..2 uniform in [-1, 1]; input 3 (AdamW's second moment, or clip_coef's
  // sum of squares) positive.
  auto last_positive = [](int last) {
    return [last](int i, HostTensor& v, std::mt19937_64& r) {
      std::uniform_real_distribution<double> dist(i == last ? 0.01 : -1.0, 1.0);
      for (double& x : v.data) x = dist(r);
    };
  };
  AttrMap adamw{{"lr", 0.01},  {"beta1", 0.9},          {"beta2", 0.95},
                {"eps", 1e-8}, {"weight_decay", 0.1}, {"step", int64_t{3}}};
  out.push_back({"plain", OpKind::kSgd, {t, t}, {{"lr", 0.1}}});
  out.push_back({"weight_decay", OpKind::kSgd, {t, t}, {{"lr", 0.1}, {"weight_decay", 0.01}}});
  out.push_back({"step3", OpKind::kAdamW, {t, t, t, t}, adamw, last_positive(3)});
  adamw.Set("step", int64_t{1});
  out.push_back({"step1", OpKind::kAdamW, {t, t, t, t}, adamw, last_positive(3)});
  out.push_back({"scalar", OpKind::kClipCoef, {F64({})}, {{"max_norm", 0.5}},
                 last_positive(0)});
}

}  // namespace loom::ir::testing
