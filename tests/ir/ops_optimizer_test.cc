#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/op_schema.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::ExpectNear;
using ::loom::ir::testing::F64;
using ::loom::ir::testing::I64;
using ::loom::ir::testing::Make;
using ::loom::ir::testing::RunOp;

AttrMap AdamWAttrs(double lr, double beta1, double beta2, double eps, double weight_decay,
                   int64_t step) {
  return AttrMap{{"lr", lr},   {"beta1", beta1},       {"beta2", beta2},
                 {"eps", eps}, {"weight_decay", weight_decay}, {"step", step}};
}

// ---- sgd --------------------------------------------------------------------------

// sgd subtracts lr * (grad + weight_decay * param); weight decay defaults to zero.
TEST(OptimizerOpsTest, SgdAddsWeightDecayToTheGradient) {
  HostTensor param = Make({2}, {1.0, -2.0});
  HostTensor grad = Make({2}, {0.5, 0.25});
  auto plain = RunOp(OpKind::kSgd, {param, grad}, {{"lr", 0.1}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ExpectNear((*plain)[0], {1.0 - 0.05, -2.0 - 0.025});
  auto decayed = RunOp(OpKind::kSgd, {param, grad}, {{"lr", 0.1}, {"weight_decay", 0.01}});
  ASSERT_TRUE(decayed.ok()) << decayed.status();
  // 1 - 0.1 * (0.5 + 0.01), -2 - 0.1 * (0.25 - 0.02).
  ExpectNear((*decayed)[0], {0.949, -2.023});
}

// ---- adamw ------------------------------------------------------------------------------

// Two AdamW steps chained through the moment outputs match a hand computation with
// lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, from zero moments.
TEST(OptimizerOpsTest, AdamWMatchesHandComputationOverTwoSteps) {
  HostTensor param = Make({2}, {1.0, -2.0});
  HostTensor zeros = Make({2}, {0.0, 0.0});
  auto step1 = RunOp(OpKind::kAdamW, {param, Make({2}, {0.5, -0.1}), zeros, zeros},
                     AdamWAttrs(0.1, 0.9, 0.999, 1e-8, 0.01, 1));
  ASSERT_TRUE(step1.ok()) << step1.status();
  ASSERT_EQ(step1->size(), 3u);
  // m = 0.1 g, v = 0.001 g^2; corrected: mhat = g, vhat = g^2, so the step is lr * sign(g)
  // up to eps: 1 - 0.001 - 0.1 * 0.5 / 0.50000001, -2 + 0.002 + 0.1 * 0.1 / 0.10000001.
  ExpectNear((*step1)[1], {0.05, -0.01});
  ExpectNear((*step1)[2], {0.00025, 0.00001});
  ExpectNear((*step1)[0], {0.899 + 0.1 * 1e-8 / 0.50000001, -1.898 - 0.1 * 1e-8 / 0.10000001});

  auto step2 = RunOp(OpKind::kAdamW,
                     {(*step1)[0], Make({2}, {-0.25, 0.3}), (*step1)[1], (*step1)[2]},
                     AdamWAttrs(0.1, 0.9, 0.999, 1e-8, 0.01, 2));
  ASSERT_TRUE(step2.ok()) << step2.status();
  // m = 0.9 m + 0.1 g = (0.045 - 0.025, -0.009 + 0.03);
  // v = 0.999 v + 0.001 g^2 = (0.00024975 + 0.0000625, 0.00000999 + 0.00009);
  // mhat = m / 0.19, vhat = v / 0.001999;
  // param = p1 - 0.001 p1 - 0.1 mhat / (sqrt(vhat) + 1e-8).
  ExpectNear((*step2)[1], {0.02, 0.021});
  ExpectNear((*step2)[2], {0.00031225, 0.00009999});
  ExpectNear((*step2)[0], {0.8714672987058463, -1.9455209911100655}, 1e-10);
}

// Bias correction: from zero moments with eps 0 and no decay, step 1 moves every
// parameter by exactly lr * sign(g) whatever |g|; at step 2 the move is
// lr * sqrt(1 + beta2) / (1 + beta1); at a huge step the correction vanishes.
TEST(OptimizerOpsTest, AdamWBiasCorrectionDependsOnStep) {
  const double lr = 0.1, beta1 = 0.9, beta2 = 0.999;
  HostTensor param = Make({4}, {0.0, 0.0, 0.0, 0.0});
  HostTensor grad = Make({4}, {1e-3, 0.5, -7.0, 30.0});
  HostTensor zeros = Make({4}, {0.0, 0.0, 0.0, 0.0});
  auto run = [&](int64_t step) {
    auto out = RunOp(OpKind::kAdamW, {param, grad, zeros, zeros},
                     AdamWAttrs(lr, beta1, beta2, /*eps=*/0.0, /*weight_decay=*/0.0, step));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0] : HostTensor();
  };
  ExpectNear(run(1), {-lr, -lr, lr, -lr});
  double s2 = lr * std::sqrt(1.0 + beta2) / (1.0 + beta1);
  ExpectNear(run(2), {-s2, -s2, s2, -s2});
  // Uncorrected: m = 0.1 g, v = 0.001 g^2, so the move is lr * 0.1 / sqrt(0.001).
  double s_inf = lr * (1.0 - beta1) / std::sqrt(1.0 - beta2);
  ExpectNear(run(100000), {-s_inf, -s_inf, s_inf, -s_inf}, 1e-9);
}

// Weight decay is decoupled: it shrinks the old parameter by lr * weight_decay and
// does not enter the moments.
TEST(OptimizerOpsTest, AdamWDecayIsDecoupledFromMoments) {
  HostTensor param = Make({1}, {3.0});
  HostTensor grad = Make({1}, {0.0});
  HostTensor m = Make({1}, {0.0});
  HostTensor v = Make({1}, {0.0});
  auto out = RunOp(OpKind::kAdamW, {param, grad, m, v}, AdamWAttrs(0.5, 0.9, 0.999, 1e-8, 0.2, 1));
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectNear((*out)[0], {3.0 - 0.5 * 0.2 * 3.0});
  ExpectNear((*out)[1], {0.0});
  ExpectNear((*out)[2], {0.0});
}

// ---- clip_coef ------------------------------------------------------------------------

// clip_coef = min(1, max_norm / (sqrt(sumsq) + eps)), eps 1e-6 unless given.
TEST(OptimizerOpsTest, ClipCoefScalesOnlyNormsAboveMax) {
  auto big = RunOp(OpKind::kClipCoef, {Make({}, {16.0})}, {{"max_norm", 1.0}});
  ASSERT_TRUE(big.ok()) << big.status();
  ExpectNear((*big)[0], {1.0 / (4.0 + 1e-6)}, 1e-15);
  auto small = RunOp(OpKind::kClipCoef, {Make({}, {0.25})}, {{"max_norm", 1.0}});
  ASSERT_TRUE(small.ok()) << small.status();
  ExpectNear((*small)[0], {1.0}, 0.0);
  auto custom = RunOp(OpKind::kClipCoef, {Make({}, {4.0})}, {{"max_norm", 1.0}, {"eps", 0.5}});
  ASSERT_TRUE(custom.ok()) << custom.status();
  ExpectNear((*custom)[0], {0.4});
}

// ---- shape inference, signatures, FLOPs ----------------------------------------------

// Bad shapes, dtypes and attributes (every AdamW attribute is required) are rejected.
TEST(OptimizerOpsTest, ShapeInferenceRejectsBadInputsAndAttributes) {
  struct Case {
    OpKind kind;
    std::vector<TensorType> inputs;
    AttrMap attrs;
    std::string message;
  };
  TensorType p = F64({2, 3});
  std::vector<Case> cases = {
      {OpKind::kSgd, {p, F64({3, 2})}, {{"lr", 0.1}}, "input 1 is f64[3,2], expected dims [2,3]"},
      {OpKind::kSgd, {p, I64({2, 3})}, {{"lr", 0.1}}, "input 1 has dtype i64"},
      {OpKind::kSgd, {p, p}, {}, "'lr'"},
      {OpKind::kAdamW, {p, p, p, F64({2})}, AdamWAttrs(0.1, 0.9, 0.99, 1e-8, 0.0, 1),
       "input 3 is f64[2], expected dims [2,3]"},
      {OpKind::kAdamW, {p, p, p, p}, AdamWAttrs(0.1, 0.9, 0.99, 1e-8, 0.0, 0),
       "attribute 'step' is 0, expected at least 1"},
      {OpKind::kAdamW, {p, p, p, p}, AdamWAttrs(0.1, 1.0, 0.99, 1e-8, 0.0, 1),
       "attribute 'beta1' is 1"},
      {OpKind::kAdamW, {p, p, p, p}, AdamWAttrs(0.1, 0.9, -0.5, 1e-8, 0.0, 1),
       "attribute 'beta2' is -0.5"},
      {OpKind::kClipCoef, {F64({3})}, {{"max_norm", 1.0}}, "expected a scalar"},
      {OpKind::kClipCoef, {F64({})}, {}, "'max_norm'"},
      {OpKind::kClipCoef, {F64({})}, {{"max_norm", 0.0}}, "attribute 'max_norm' is 0"},
  };
  const AttrMap all = AdamWAttrs(0.1, 0.9, 0.99, 1e-8, 0.0, 1);
  for (const char* name : {"lr", "beta1", "beta2", "eps", "weight_decay", "step"}) {
    AttrMap attrs;
    for (const auto& [key, value] : all.values()) {
      if (key != name) attrs.Set(key, value);
    }
    cases.push_back({OpKind::kAdamW, {p, p, p, p}, attrs, absl::StrCat("'", name, "'")});
  }
  AttrMap float_step = AdamWAttrs(0.1, 0.9, 0.99, 1e-8, 0.0, 1);
  float_step.Set("step", 2.0);
  cases.push_back({OpKind::kAdamW, {p, p, p, p}, float_step, "'step' must be an integer"});
  for (const Case& c : cases) {
    auto out = InferOutputTypes(c.kind, c.inputs, c.attrs);
    ASSERT_FALSE(out.ok()) << c.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(out.status().message().find(c.message), std::string::npos)
        << "want '" << c.message << "', got: " << out.status().message();
  }
}

// Each updated value keeps the dtype of its old value (f32 moments of a bf16 parameter).
TEST(OptimizerOpsTest, AdamWOutputsKeepTheirInputTypes) {
  TensorType param{Shape({4, 2}), DType::kBF16};
  TensorType state{Shape({4, 2}), DType::kF32};
  auto out = InferOutputTypes(OpKind::kAdamW, {param, state, state, state},
                              AdamWAttrs(0.1, 0.9, 0.95, 1e-8, 0.1, 3));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, (std::vector<TensorType>{param, state, state}));
}

// Updates are elementwise in every dim; clip_coef is scalar in and out.
TEST(OptimizerOpsTest, SignaturesAreElementwiseOrScalar) {
  TensorType p = F64({2, 3});
  auto sgd = GetOpSchema(OpKind::kSgd).signature({p, p}, {{"lr", 0.1}});
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_EQ(sgd->ToString(), "d0 d1, d0 d1 -> d0 d1");
  auto adamw = GetOpSchema(OpKind::kAdamW)
                   .signature({p, p, p, p}, AdamWAttrs(0.1, 0.9, 0.95, 1e-8, 0.1, 1));
  ASSERT_TRUE(adamw.ok()) << adamw.status();
  EXPECT_EQ(adamw->ToString(), "d0 d1, d0 d1, d0 d1, d0 d1 -> d0 d1, d0 d1, d0 d1");
  auto clip = GetOpSchema(OpKind::kClipCoef).signature({F64({})}, {{"max_norm", 1.0}});
  ASSERT_TRUE(clip.ok()) << clip.status();
  EXPECT_EQ(clip->inputs, (std::vector<std::vector<std::string>>{{}}));
  EXPECT_EQ(clip->outputs, (std::vector<std::vector<std::string>>{{}}));
  EXPECT_TRUE(clip->kinds.empty());
}

// FLOPs: sgd 3 and adamw 12 per element, clip_coef 4.
TEST(OptimizerOpsTest, FlopsPerElement) {
  TensorType p = F64({2, 3});
  EXPECT_EQ(GetOpSchema(OpKind::kSgd).flops({p, p}, {p}, {{"lr", 0.1}}), 18.0);
  EXPECT_EQ(GetOpSchema(OpKind::kAdamW).flops({p, p, p, p}, {p, p, p}, {}), 72.0);
  EXPECT_EQ(GetOpSchema(OpKind::kClipCoef).flops({F64({})}, {F64({})}, {}), 4.0);
}

}  // namespace
}  // namespace loom::ir
