// LayerNorm and RMSNorm: shape rules, signatures, kernels against naive references,
// and the fused gradient ops against finite differences.

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/op_schema.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using testing::Dot;
using testing::F64;
using testing::I64;
using testing::NumericGradient;
using testing::RunOp;

using Ints = std::vector<int64_t>;

HostTensor Random(Ints dims, std::mt19937_64& rng) {
  HostTensor t(Shape(std::move(dims)), DType::kF64);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (double& x : t.data) x = dist(rng);
  return t;
}

void ExpectAllNear(const HostTensor& actual, const HostTensor& expected, double tol) {
  ASSERT_TRUE(actual.shape.SameDims(expected.shape))
      << actual.shape.ToString() << " vs " << expected.shape.ToString();
  for (int64_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
  }
}

std::string InferError(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs = {}) {
  auto out = InferOutputTypes(kind, in, attrs);
  return out.ok() ? "ok" : std::string(out.status().message());
}

std::string Signature(OpKind kind, std::vector<TensorType> in) {
  auto sig = GetOpSchema(kind).signature(in, {});
  return sig.ok() ? sig->ToString() : std::string(sig.status().message());
}

// Naive LayerNorm (beta empty) or RMSNorm (rms = true) over the last dim.
HostTensor NaiveNorm(const HostTensor& x, const HostTensor& gamma, const HostTensor* beta,
                     double eps, bool rms) {
  const int64_t d = gamma.size();
  HostTensor y(x.shape, x.dtype);
  for (int64_t r = 0; r < x.size() / d; ++r) {
    double mean = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < d; ++j) mean += x[r * d + j] / d;
    }
    double second = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      second += (x[r * d + j] - mean) * (x[r * d + j] - mean) / d;
    }
    for (int64_t j = 0; j < d; ++j) {
      y[r * d + j] = (x[r * d + j] - mean) / std::sqrt(second + eps) * gamma[j] +
                     (beta != nullptr ? (*beta)[j] : 0.0);
    }
  }
  return y;
}

// ---- forward kernels ---------------------------------------------------------------------

// layernorm normalises each row with the biased variance, then scales and shifts.
TEST(NormOpsTest, LayerNormMatchesNaiveFormula) {
  std::mt19937_64 rng(1);
  HostTensor x = Random({2, 3, 4}, rng);
  HostTensor gamma = Random({4}, rng);
  HostTensor beta = Random({4}, rng);
  auto out = RunOp(OpKind::kLayerNorm, {x, gamma, beta}, {{"eps", 0.01}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectAllNear((*out)[0], NaiveNorm(x, gamma, &beta, 0.01, /*rms=*/false), 1e-13);
}

// Without an eps attribute both norms use 1e-5, visible on a row of tiny variance.
TEST(NormOpsTest, NormsDefaultEpsToOneEMinusFive) {
  HostTensor x(Shape({1, 2}), DType::kF64);
  x.data = {0.0, 0.002};
  HostTensor gamma(Shape({2}), DType::kF64);
  gamma.data = {1.0, 1.0};
  HostTensor beta(Shape({2}), DType::kF64);
  auto ln = RunOp(OpKind::kLayerNorm, {x, gamma, beta});
  ASSERT_TRUE(ln.ok()) << ln.status();
  ExpectAllNear((*ln)[0], NaiveNorm(x, gamma, &beta, 1e-5, /*rms=*/false), 1e-12);
  EXPECT_GT(std::abs((*ln)[0][1] - 1.0), 0.01);  // eps = 0 would give exactly 1
  auto rms = RunOp(OpKind::kRmsNorm, {x, gamma});
  ASSERT_TRUE(rms.ok()) << rms.status();
  ExpectAllNear((*rms)[0], NaiveNorm(x, gamma, nullptr, 1e-5, /*rms=*/true), 1e-12);
}

// rmsnorm divides by the root mean square (no centring) and scales by gamma.
TEST(NormOpsTest, RmsNormMatchesNaiveFormula) {
  std::mt19937_64 rng(2);
  HostTensor x = Random({3, 5}, rng);
  HostTensor gamma = Random({5}, rng);
  auto out = RunOp(OpKind::kRmsNorm, {x, gamma}, {{"eps", 1e-6}});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectAllNear((*out)[0], NaiveNorm(x, gamma, nullptr, 1e-6, /*rms=*/true), 1e-13);
}

// ---- gradient kernels --------------------------------------------------------------------

// layernorm_grad gives the gradients of sum(dy * layernorm(x, gamma, beta)).
TEST(NormOpsTest, LayerNormGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  HostTensor x = Random({2, 2, 4}, rng);
  HostTensor gamma = Random({4}, rng);
  HostTensor beta = Random({4}, rng);
  HostTensor dy = Random({2, 2, 4}, rng);
  const double eps = 0.05;
  auto objective = [&](const HostTensor& xv, const HostTensor& g, const HostTensor& b) {
    return Dot(dy, NaiveNorm(xv, g, &b, eps, /*rms=*/false));
  };
  auto grads = RunOp(OpKind::kLayerNormGrad, {x, gamma, dy}, {{"eps", eps}});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 3u);
  ExpectAllNear((*grads)[0],
                NumericGradient([&](const HostTensor& v) { return objective(v, gamma, beta); }, x),
                1e-8);
  ExpectAllNear((*grads)[1],
                NumericGradient([&](const HostTensor& v) { return objective(x, v, beta); }, gamma),
                1e-8);
  ExpectAllNear((*grads)[2],
                NumericGradient([&](const HostTensor& v) { return objective(x, gamma, v); }, beta),
                1e-8);
}

// rmsnorm_grad gives the gradients of sum(dy * rmsnorm(x, gamma)).
TEST(NormOpsTest, RmsNormGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  HostTensor x = Random({3, 4}, rng);
  HostTensor gamma = Random({4}, rng);
  HostTensor dy = Random({3, 4}, rng);
  auto objective = [&](const HostTensor& xv, const HostTensor& g) {
    return Dot(dy, NaiveNorm(xv, g, nullptr, 1e-5, /*rms=*/true));
  };
  auto grads = RunOp(OpKind::kRmsNormGrad, {x, gamma, dy});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), 2u);
  ExpectAllNear((*grads)[0],
                NumericGradient([&](const HostTensor& v) { return objective(v, gamma); }, x),
                1e-7);
  ExpectAllNear((*grads)[1],
                NumericGradient([&](const HostTensor& v) { return objective(x, v); }, gamma),
                1e-7);
}

// The forward rules emit the fused gradient ops with the forward's eps.
TEST(NormOpsTest, GradientRulesEmitFusedGradOps) {
  Graph g("norms");
  TensorId x = *g.AddInput("x", Shape({2, 4}), DType::kF64, TensorRole::kInput);
  TensorId gamma = *g.AddInput("gamma", Shape({4}), DType::kF64, TensorRole::kParameter);
  TensorId beta = *g.AddInput("beta", Shape({4}), DType::kF64, TensorRole::kParameter);
  auto ln = g.AddOp(OpKind::kLayerNorm, {x, gamma, beta}, {{"eps", 0.25}}, OpInfo{}, {{"ln"}});
  ASSERT_TRUE(ln.ok()) << ln.status();
  auto rms = g.AddOp(OpKind::kRmsNorm, {(*ln)[0], gamma}, {}, OpInfo{}, {{"rms"}});
  ASSERT_TRUE(rms.ok()) << rms.status();
  auto loss = g.AddOp(OpKind::kSumSquares, {(*rms)[0]}, {}, OpInfo{}, {{"loss"}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto grads = AppendBackward(g, (*loss)[0], {x, gamma, beta});
  ASSERT_TRUE(grads.ok()) << grads.status();

  const Op& dx = g.op(g.tensor(*(*grads)[0]).producer);
  EXPECT_EQ(dx.kind, OpKind::kLayerNormGrad);
  EXPECT_EQ(dx.attrs.ToString(), "{eps=0.25}");
  EXPECT_EQ(dx.inputs[0], x);
  EXPECT_EQ(dx.inputs[1], gamma);
  const Op& dbeta = g.op(g.tensor(*(*grads)[2]).producer);
  EXPECT_EQ(dbeta.kind, OpKind::kLayerNormGrad);
  EXPECT_EQ(g.tensor(*(*grads)[2]).output_index, 2);
  int rms_grads = 0;
  for (const Op& op : g.ops()) rms_grads += op.kind == OpKind::kRmsNormGrad;
  EXPECT_EQ(rms_grads, 1);
}

// ---- shapes and signatures ---------------------------------------------------------------

// Parameters must be float [d] for x [..., d]; eps must be non-negative.
TEST(NormOpsTest, RejectsMismatchedInputs) {
  EXPECT_EQ(InferError(OpKind::kLayerNorm, {F64({2, 4}), F64({3}), F64({4})}),
            "input 1 is f64[3], expected dims [4]");
  EXPECT_EQ(InferError(OpKind::kLayerNorm, {F64({2, 4}), F64({4}), F64({4, 1})}),
            "input 2 is f64[4,1], expected dims [4]");
  EXPECT_EQ(InferError(OpKind::kRmsNorm, {F64({}), F64({1})}),
            "input 0 has 0 dims, expected at least 1");
  EXPECT_EQ(InferError(OpKind::kRmsNorm, {I64({2, 4}), F64({4})}),
            "input 0 has dtype i64, expected a float type");
  EXPECT_EQ(InferError(OpKind::kRmsNorm, {F64({2, 4}), F64({4})}, {{"eps", -1.0}}),
            "attribute 'eps' is -1, expected a non-negative number");
  EXPECT_EQ(InferError(OpKind::kLayerNormGrad, {F64({2, 4}), F64({4}), F64({4, 2})}),
            "input 2 is f64[4,2], expected f64[2,4] like input 0");
}

// The gradient ops return dx like x and parameter gradients like gamma.
TEST(NormOpsTest, GradOpsReturnInputShapedGradients) {
  auto ln = InferOutputTypes(OpKind::kLayerNormGrad, {F64({2, 3, 4}), F64({4}), F64({2, 3, 4})},
                             {});
  ASSERT_TRUE(ln.ok()) << ln.status();
  ASSERT_EQ(ln->size(), 3u);
  EXPECT_EQ((*ln)[0].ToString(), "f64[2,3,4]");
  EXPECT_EQ((*ln)[1].ToString(), "f64[4]");
  EXPECT_EQ((*ln)[2].ToString(), "f64[4]");
  auto rms = InferOutputTypes(OpKind::kRmsNormGrad, {F64({3, 4}), F64({4}), F64({3, 4})}, {});
  ASSERT_TRUE(rms.ok()) << rms.status();
  ASSERT_EQ(rms->size(), 2u);
  EXPECT_EQ((*rms)[1].ToString(), "f64[4]");
}

// Forward: leading dims spatial, d fixed. Backward: leading dims reduce into dgamma/dbeta.
TEST(NormOpsTest, SignaturesFixNormalisedDim) {
  EXPECT_EQ(Signature(OpKind::kLayerNorm, {F64({2, 3, 4}), F64({4}), F64({4})}),
            "d0 d1 d2, d2, d2 -> d0 d1 d2 | d2:fixed");
  EXPECT_EQ(Signature(OpKind::kRmsNorm, {F64({3, 4}), F64({4})}), "d0 d1, d1 -> d0 d1 | d1:fixed");
  EXPECT_EQ(Signature(OpKind::kLayerNormGrad, {F64({2, 3, 4}), F64({4}), F64({2, 3, 4})}),
            "d0 d1 d2, d2, d0 d1 d2 -> d0 d1 d2, d2, d2 | d0:reduce d1:reduce d2:fixed");
  EXPECT_EQ(Signature(OpKind::kRmsNormGrad, {F64({3, 4}), F64({4}), F64({3, 4})}),
            "d0 d1, d1, d0 d1 -> d0 d1, d1 | d0:reduce d1:fixed");
}

// FLOPs are per element of x: 8 for layernorm, twice that for its gradient.
TEST(NormOpsTest, FlopsScaleWithElements) {
  std::vector<TensorType> in = {F64({2, 4}), F64({4}), F64({4})};
  auto out = InferOutputTypes(OpKind::kLayerNorm, in, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(GetOpSchema(OpKind::kLayerNorm).flops(in, *out, {}), 64.0);
  std::vector<TensorType> grad_in = {F64({2, 4}), F64({4}), F64({2, 4})};
  auto grad_out = InferOutputTypes(OpKind::kLayerNormGrad, grad_in, {});
  ASSERT_TRUE(grad_out.ok()) << grad_out.status();
  EXPECT_EQ(GetOpSchema(OpKind::kLayerNormGrad).flops(grad_in, *grad_out, {}), 128.0);
}

}  // namespace
}  // namespace loom::ir
