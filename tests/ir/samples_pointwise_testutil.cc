#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

void AddPointwiseSamples(std::mt19937_64& rng, std::vector<OpSample>& out) {
  const int64_t d0 = RandomDim(rng, 2, 3);
  const int64_t d1 = RandomDim(rng, 2, 4);
  const TensorType t = F64({d0, d1});
  const TensorType row = F64({1, d1});
  const TensorType col = F64({d0, 1});
  const TensorType scalar = F64({});
  const TensorType flags{Shape({d0, d1}), DType::kBool};
  const TensorType flag_row{Shape({d1}), DType::kBool};
  auto positive = [](int, HostTensor& v, std::mt19937_64& r) {
    std::uniform_real_distribution<double> dist(0.5, 2.0);
    for (double& x : v.data) x = dist(r);
  };
  // Away from relu's kink, so that finite differences see one side of it.
  auto off_zero = [](int, HostTensor& v, std::mt19937_64& r) {
    std::uniform_real_distribution<double> dist(0.2, 1.0);
    std::bernoulli_distribution sign(0.5);
    for (double& x : v.data) x = sign(r) ? dist(r) : -dist(r);
  };
  // Small integers in floats, so that comparisons meet equal values too.
  auto small_ints = [](int, HostTensor& v, std::mt19937_64& r) {
    std::uniform_int_distribution<int> dist(0, 2);
    for (double& x : v.data) x = dist(r);
  };
  // Broadcasting forms of the elementwise arithmetic.
  out.push_back({"row", OpKind::kAdd, {t, row}});
  out.push_back({"column", OpKind::kSub, {col, t}});
  out.push_back({"scalar", OpKind::kMul, {t, scalar}});
  out.push_back({"vector", OpKind::kMul, {t, F64({d1})}});
  out.push_back({"binary", OpKind::kDiv, {t, t}, {}, positive});
  out.push_back({"row", OpKind::kDiv, {t, row}, {}, positive});
  out.push_back({"binary", OpKind::kWhere, {flags, t, t}});
  out.push_back({"broadcast", OpKind::kWhere, {flag_row, t, scalar}});
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
    out.push_back({op, OpKind::kCompare, {t, t}, {{"op", std::string(op)}}, small_ints});
  }
  out.push_back({"scalar", OpKind::kCompare, {t, scalar}, {{"op", std::string("ne")}},
                 small_ints});
  out.push_back({"and", OpKind::kLogical, {flags, flags}, {{"op", std::string("and")}}});
  out.push_back({"or", OpKind::kLogical, {flags, flag_row}, {{"op", std::string("or")}}});
  out.push_back({"positive", OpKind::kSqrt, {t}, {}, positive});
  out.push_back({"unary", OpKind::kCos, {t}});
  out.push_back({"unary", OpKind::kSin, {t}});
  out.push_back({"unary", OpKind::kTanh, {t}});
  out.push_back({"unary", OpKind::kSigmoid, {t}});
  out.push_back({"off_zero", OpKind::kRelu, {t}, {}, off_zero});
  out.push_back({"pair", OpKind::kTanhGrad, {t, t}});
  out.push_back({"pair", OpKind::kSigmoidGrad, {t, t}});
  out.push_back({"off_zero", OpKind::kReluGrad, {t, t}, {}, off_zero});
  out.push_back({"to_f32", OpKind::kCast, {t}, {{"dtype", std::string("f32")}}});
  out.push_back({"to_i64", OpKind::kCast, {t}, {{"dtype", std::string("i64")}}});
  out.push_back({"from_i64", OpKind::kCast, {I64({d0, d1})}, {{"dtype", std::string("f64")}},
                 nullptr, /*int_bound=*/5});
  out.push_back({"to_bool", OpKind::kCast, {t}, {{"dtype", std::string("bool")}}, small_ints});
  out.push_back({"integers", OpKind::kArange, {},
                 {{"start", int64_t{2}}, {"step", int64_t{3}}, {"size", d1},
                  {"dtype", std::string("i64")}}});
  out.push_back({"floats", OpKind::kArange, {},
                 {{"start", 0.5}, {"step", -0.25}, {"size", d0}, {"dtype", std::string("f64")}}});
  out.push_back({"rows", OpKind::kCumsum, {t}, {{"dim", int64_t{0}}}});
  out.push_back({"last", OpKind::kCumsum, {t}, {{"dim", int64_t{-1}}}});
  out.push_back({"one_index", OpKind::kIndex, {t, I64({d1 + 1})}, {}, nullptr, /*int_bound=*/d0});
  out.push_back({"two_indices", OpKind::kIndex, {t, I64({2, 1}), I64({3})}, {}, nullptr,
                 /*int_bound=*/2});
}

}  // namespace loom::ir::testing
