#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddElementwiseSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  std::vector<int64_t> dims = {RandomDim(rng, 1, 3), RandomDim(rng, 2, 4)};
  TensorType t = F64(dims);
  TensorType scalar = F64({});
  auto positive = [](int, HostTensor& v, std::mt19937_64& r) {
    std::uniform_real_distribution<double> dist(0.5, 2.0);
    for (double& x : v.data) x = dist(r);
  };
  out.push_back({"binary", OpKind::kAdd, {t, t}});
  out.push_back({"binary", OpKind::kSub, {t, t}});
  out.push_back({"binary", OpKind::kMul, {t, t}});
  out.push_back({"three", OpKind::kAccumulate, {t, t, t}});
  out.push_back({"unary", OpKind::kNeg, {t}});
  out.push_back({"unary", OpKind::kExp, {t}});
  out.push_back({"positive", OpKind::kRsqrt, {t}, {}, positive});
  out.push_back({"positive", OpKind::kLog, {t}, {}, positive});
  out.push_back({"unary", OpKind::kStopGradient, {t}});
  out.push_back({"cube", OpKind::kPow, {t}, {{"exponent", 3.0}}});
  out.push_back({"fractional", OpKind::kPow, {t}, {{"exponent", 1.5}}, positive});
  out.push_back({"factor", OpKind::kScale, {t}, {{"factor", -0.75}}});
  out.push_back({"by_scalar", OpKind::kDivScalar, {t, scalar}, {}, positive});
  out.push_back({"by_scalar", OpKind::kMulScalar, {t, scalar}});
  out.push_back({"unary", OpKind::kGelu, {t}});
  out.push_back({"unary", OpKind::kSilu, {t}});
  out.push_back({"pair", OpKind::kSwiGlu, {t, t}});
  out.push_back({"pair", OpKind::kGeluGrad, {t, t}});
  out.push_back({"unary", OpKind::kGeluExact, {t}});
  out.push_back({"pair", OpKind::kGeluExactGrad, {t, t}});
  out.push_back({"pair", OpKind::kSiluGrad, {t, t}});
  out.push_back({"triple", OpKind::kSwiGluGrad, {t, t, t}});
  out.push_back({"constant", OpKind::kFill, {},
                 {{"shape", dims}, {"value", 1.5}, {"dtype", std::string("f64")}}});
}

}  // namespace loom::ir::testing
