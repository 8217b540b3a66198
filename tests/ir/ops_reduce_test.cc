// Reductions, softmax and cross-entropy: shape rules, signatures, kernels against
// naive references, and the gradient rules.

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using testing::F64;
using testing::I64;
using testing::Make;
using testing::NumericGradient;
using testing::RunOp;

using Ints = std::vector<int64_t>;

HostTensor Random(Ints dims, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  HostTensor t(Shape(std::move(dims)), DType::kF64);
  std::uniform_real_distribution<double> dist(lo, hi);
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

std::string Signature(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs = {}) {
  auto sig = GetOpSchema(kind).signature(in, attrs);
  return sig.ok() ? sig->ToString() : std::string(sig.status().message());
}

double Flops(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs = {}) {
  auto out = InferOutputTypes(kind, in, attrs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? GetOpSchema(kind).flops(in, *out, attrs) : -1.0;
}

// Naive softmax over the last dim, without max shifting.
HostTensor NaiveSoftmax(const HostTensor& x) {
  const int64_t n = x.shape.dim(x.shape.rank() - 1);
  HostTensor y(x.shape, x.dtype);
  for (int64_t r = 0; r < x.size() / n; ++r) {
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j]);
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = std::exp(x[r * n + j]) / s;
  }
  return y;
}

// ---- sum and mean ----------------------------------------------------------------------

// Reduced dims are removed; summing every dim gives a scalar; no dims is the identity.
// A mean's `count` replaces the number it divides by; it must be at least 1.
TEST(ReduceOpsTest, MeanDividesByItsCountWhereSet) {
  std::mt19937_64 rng(3);
  HostTensor a = Random({2, 3}, rng);
  auto out = RunOp(OpKind::kMean, {a}, {{"dims", Ints{1}}, {"count", int64_t{6}}});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR((*out)[0][i], (a[3 * i] + a[3 * i + 1] + a[3 * i + 2]) / 6.0, 1e-12);
  }
  EXPECT_EQ(InferError(OpKind::kMean, {F64({2, 3})}, {{"dims", Ints{1}}, {"count", int64_t{0}}}),
            "attribute 'count' is 0, expected at least 1");
}

// A piece holding a chunk of a reduced dim divides by the whole op's count (a
// partial sum of the mean); a piece with the reduced dims whole keeps the attributes.
TEST(ReduceOpsTest, APieceOfAMeanOverAChunkDividesByTheWholeCount) {
  const OpSchema& schema = GetOpSchema(OpKind::kMean);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const AttrMap attrs{{"dims", Ints{1}}};
  const std::vector<TensorType> in = {F64({4, 6})};
  const std::vector<TensorType> out = {F64({4})};
  auto chunk = schema.shard_attrs(attrs, in, {Box{{0, 4}, {3, 6}}}, out, {Box{{0, 4}}});
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->ToString(), "{count=6, dims=[1]}");
  auto rows = schema.shard_attrs(attrs, in, {Box{{0, 2}, {0, 6}}}, out, {Box{{0, 2}}});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->ToString(), "{dims=[1]}");
}

TEST(ReduceOpsTest, SumRemovesReducedDims) {
  auto out = InferOutputTypes(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{0, -1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ToString(), "f64[3]");
  out = InferOutputTypes(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{2, 0, 1}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ToString(), "f64[]");
  out = InferOutputTypes(OpKind::kMean, {F64({2, 3})}, {{"dims", Ints{}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ToString(), "f64[2,3]");
}

// Out-of-range, repeated and missing dims and integer inputs are rejected by name.
TEST(ReduceOpsTest, SumRejectsBadDims) {
  EXPECT_EQ(InferError(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{3}}}),
            "attribute 'dims': dim 3 is out of range for rank 3");
  EXPECT_EQ(InferError(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{-4}}}),
            "attribute 'dims': dim -4 is out of range for rank 3");
  EXPECT_EQ(InferError(OpKind::kMean, {F64({2, 3, 4})}, {{"dims", Ints{1, -2}}}),
            "attribute 'dims' names dim 1 more than once");
  EXPECT_EQ(InferError(OpKind::kSum, {F64({2, 3})}), "missing attribute 'dims'");
  EXPECT_EQ(InferError(OpKind::kSum, {I64({2, 3})}, {{"dims", Ints{0}}}),
            "input 0 has dtype i64, expected a float type");
}

// sum over outer dims and over a middle dim matches explicit loops.
TEST(ReduceOpsTest, SumMatchesNaiveLoops) {
  std::mt19937_64 rng(1);
  HostTensor a = Random({2, 3, 4}, rng);
  auto outer = RunOp(OpKind::kSum, {a}, {{"dims", Ints{0, -1}}});
  ASSERT_TRUE(outer.ok()) << outer.status();
  HostTensor want_outer(Shape({3}), DType::kF64);
  auto middle = RunOp(OpKind::kSum, {a}, {{"dims", Ints{1}}});
  ASSERT_TRUE(middle.ok()) << middle.status();
  HostTensor want_middle(Shape({2, 4}), DType::kF64);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        want_outer[j] += a[(i * 3 + j) * 4 + k];
        want_middle[i * 4 + k] += a[(i * 3 + j) * 4 + k];
      }
    }
  }
  ExpectAllNear((*outer)[0], want_outer, 1e-12);
  ExpectAllNear((*middle)[0], want_middle, 1e-12);
}

// Summing every dim gives the total as a rank-0 tensor.
TEST(ReduceOpsTest, SumOverEveryDimGivesScalarTotal) {
  HostTensor a = Make({2, 2}, {1.0, 2.0, 3.0, 4.5});
  auto out = RunOp(OpKind::kSum, {a}, {{"dims", Ints{1, 0}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.rank(), 0);
  EXPECT_DOUBLE_EQ((*out)[0][0], 10.5);
}

// mean divides the sum by the number of elements folded into each result.
TEST(ReduceOpsTest, MeanDividesSumByReducedCount) {
  std::mt19937_64 rng(2);
  HostTensor a = Random({2, 3, 4}, rng);
  auto out = RunOp(OpKind::kMean, {a}, {{"dims", Ints{-1, 0}}});
  ASSERT_TRUE(out.ok()) << out.status();
  HostTensor want(Shape({3}), DType::kF64);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) want[j] += a[(i * 3 + j) * 4 + k] / 8.0;
    }
  }
  ExpectAllNear((*out)[0], want, 1e-12);
}

// sum and mean mark reduced labels as reductions (a piece of a mean divides by the
// whole op's count: a partial sum).
TEST(ReduceOpsTest, SumAndMeanReduceTheirReducedLabels) {
  EXPECT_EQ(Signature(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{0, 2}}}),
            "d0 d1 d2 -> d1 | d0:reduce d2:reduce");
  EXPECT_EQ(Signature(OpKind::kMean, {F64({2, 3, 4})}, {{"dims", Ints{-2}}}),
            "d0 d1 d2 -> d0 d2 | d1:reduce");
  EXPECT_EQ(Signature(OpKind::kSum, {F64({2, 3})}, {{"dims", Ints{}}}), "d0 d1 -> d0 d1");
}

// The gradient of sum broadcasts dy back through reshape (1 at reduced dims) and expand.
TEST(ReduceOpsTest, SumGradientReshapesAndExpandsUpstream) {
  Graph g("sum_grad");
  TensorId x = *g.AddInput("x", Shape({2, 3, 4}), DType::kF64, TensorRole::kInput);
  auto y = g.AddOp(OpKind::kSum, {x}, {{"dims", Ints{0, 2}}}, OpInfo{}, {{"y"}});
  ASSERT_TRUE(y.ok()) << y.status();
  auto loss = g.AddOp(OpKind::kSumSquares, {(*y)[0]}, {}, OpInfo{}, {{"loss"}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  const int forward_ops = g.num_ops();
  auto grads = AppendBackward(g, (*loss)[0], {x});
  ASSERT_TRUE(grads.ok()) << grads.status();

  std::vector<std::string> emitted;
  for (OpId id = forward_ops; id < g.num_ops(); ++id) {
    const Op& op = g.op(id);
    if (op.kind == OpKind::kReshape || op.kind == OpKind::kExpand) {
      emitted.push_back(std::string(OpKindName(op.kind)) + op.attrs.ToString());
    }
  }
  EXPECT_EQ(emitted, (std::vector<std::string>{"reshape{shape=[1,3,1]}",
                                               "expand{dim=0, size=2}",
                                               "expand{dim=2, size=4}"}));

  // d/dx sum_j (sum_{i,k} x_ijk)^2 = 2 * y_j at every (i, j, k).
  std::mt19937_64 rng(3);
  HostTensor xv = Random({2, 3, 4}, rng);
  auto values = Evaluate(g, {{x, xv}});
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor& yv = *(*values)[(*y)[0]];
  HostTensor want(xv.shape, DType::kF64);
  for (int64_t e = 0; e < want.size(); ++e) want[e] = 2.0 * yv[(e / 4) % 3];
  ExpectAllNear(*(*values)[*(*grads)[0]], want, 1e-12);
}

// The gradient of mean is the broadcast upstream gradient scaled by 1/count.
TEST(ReduceOpsTest, MeanGradientScalesByInverseCount) {
  Graph g("mean_grad");
  TensorId x = *g.AddInput("x", Shape({2, 3, 4}), DType::kF64, TensorRole::kInput);
  auto y = g.AddOp(OpKind::kMean, {x}, {{"dims", Ints{1}}}, OpInfo{}, {{"y"}});
  ASSERT_TRUE(y.ok()) << y.status();
  auto loss = g.AddOp(OpKind::kSumSquares, {(*y)[0]}, {}, OpInfo{}, {{"loss"}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto grads = AppendBackward(g, (*loss)[0], {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const Op& last = g.op(g.tensor(*(*grads)[0]).producer);
  EXPECT_EQ(last.kind, OpKind::kScale);
  EXPECT_EQ(last.attrs.ToString(), "{factor=0.3333333333333333}");

  std::mt19937_64 rng(4);
  HostTensor xv = Random({2, 3, 4}, rng);
  auto values = Evaluate(g, {{x, xv}});
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor& yv = *(*values)[(*y)[0]];
  HostTensor want(xv.shape, DType::kF64);
  for (int64_t e = 0; e < want.size(); ++e) want[e] = 2.0 * yv[(e / 12) * 4 + e % 4] / 3.0;
  ExpectAllNear(*(*values)[*(*grads)[0]], want, 1e-12);
}

// ---- max ------------------------------------------------------------------------------

// max removes `dim` and takes the largest value along it (negative dims count from the end).
TEST(ReduceOpsTest, MaxTakesLargestValueAlongDim) {
  std::mt19937_64 rng(5);
  HostTensor a = Random({2, 3, 4}, rng);
  auto out = RunOp(OpKind::kMax, {a}, {{"dim", int64_t{-2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  HostTensor want(Shape({2, 4}), DType::kF64);
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) {
      double m = a[i * 12 + k];
      for (int j = 1; j < 3; ++j) m = std::max(m, a[(i * 3 + j) * 4 + k]);
      want[i * 4 + k] = m;
    }
  }
  ExpectAllNear((*out)[0], want, 0.0);
}

// max needs a non-empty dim in range, and a float input of rank >= 1.
TEST(ReduceOpsTest, MaxRejectsBadDims) {
  EXPECT_EQ(InferError(OpKind::kMax, {F64({2, 0})}, {{"dim", int64_t{1}}}),
            "input 0 has size 0 along dim 1; max needs an element");
  EXPECT_EQ(InferError(OpKind::kMax, {F64({2, 3})}, {{"dim", int64_t{2}}}),
            "attribute 'dim': dim 2 is out of range for rank 2");
  EXPECT_EQ(InferError(OpKind::kMax, {F64({})}, {{"dim", int64_t{0}}}),
            "input 0 has 0 dims, expected at least 1");
  EXPECT_EQ(InferError(OpKind::kMaxGrad, {F64({2, 3}), F64({3})}, {{"dim", int64_t{1}}}),
            "input 1 is f64[3], expected dims [2]");
}

// max_grad puts dy at the first argmax along dim (ties go to the earliest), 0 elsewhere.
TEST(ReduceOpsTest, MaxGradRoutesUpstreamToFirstArgmax) {
  HostTensor a = Make({2, 3}, {1.0, 3.0, 3.0, 2.0, 0.0, 2.0});
  auto along_rows = RunOp(OpKind::kMaxGrad, {a, Make({2}, {5.0, 7.0})}, {{"dim", int64_t{1}}});
  ASSERT_TRUE(along_rows.ok()) << along_rows.status();
  EXPECT_EQ((*along_rows)[0].data, (std::vector<double>{0, 5, 0, 7, 0, 0}));
  auto along_cols =
      RunOp(OpKind::kMaxGrad, {a, Make({3}, {1.0, 2.0, 3.0})}, {{"dim", int64_t{0}}});
  ASSERT_TRUE(along_cols.ok()) << along_cols.status();
  EXPECT_EQ((*along_cols)[0].data, (std::vector<double>{0, 2, 3, 1, 0, 0}));
}

// max's reduced dim is a max-reduction (pieces give partial maxima); max_grad fixes
// it (the argmax needs the whole dim). Other dims are spatial.
TEST(ReduceOpsTest, MaxReducesByMaxAndMaxGradFixesReducedLabel) {
  EXPECT_EQ(Signature(OpKind::kMax, {F64({2, 3})}, {{"dim", int64_t{-1}}}),
            "d0 d1 -> d0 | d1:max");
  EXPECT_EQ(Signature(OpKind::kMaxGrad, {F64({2, 3}), F64({2})}, {{"dim", int64_t{1}}}),
            "d0 d1, d0 -> d0 d1 | d1:fixed");
}

// ---- sum_squares ---------------------------------------------------------------------

// sum_squares is the scalar sum of squares, every label a reduction.
TEST(ReduceOpsTest, SumSquaresIsScalarSumOfSquares) {
  auto out = RunOp(OpKind::kSumSquares, {Make({2, 2}, {1.0, -2.0, 0.5, 3.0})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.rank(), 0);
  EXPECT_DOUBLE_EQ((*out)[0][0], 14.25);
  auto sig = GetOpSchema(OpKind::kSumSquares).signature({F64({2, 3})}, {});
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->outputs, (std::vector<std::vector<std::string>>{{}}));
  EXPECT_EQ(sig->kinds.at("d0"), DimKind::kReduction);
  EXPECT_EQ(sig->kinds.at("d1"), DimKind::kReduction);
}

// ---- softmax and log_softmax -----------------------------------------------------------

// softmax over the last dim matches exp(x) / sum(exp(x)).
TEST(ReduceOpsTest, SoftmaxMatchesExplicitFormula) {
  std::mt19937_64 rng(6);
  HostTensor x = Random({2, 3, 4}, rng, -3.0, 3.0);
  auto out = RunOp(OpKind::kSoftmax, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectAllNear((*out)[0], NaiveSoftmax(x), 1e-14);
}

// Large logits do not overflow: softmax and log_softmax are shift invariant.
TEST(ReduceOpsTest, SoftmaxIsStableForLargeLogits) {
  HostTensor big = Make({1, 3}, {1000.0, 1001.0, 1002.0});
  HostTensor small = Make({1, 3}, {0.0, 1.0, 2.0});
  for (OpKind kind : {OpKind::kSoftmax, OpKind::kLogSoftmax}) {
    auto a = RunOp(kind, {big});
    auto b = RunOp(kind, {small});
    ASSERT_TRUE(a.ok() && b.ok()) << OpKindName(kind);
    ExpectAllNear((*a)[0], (*b)[0], 1e-12);
  }
}

// log_softmax equals the log of the explicit softmax.
TEST(ReduceOpsTest, LogSoftmaxIsLogOfSoftmax) {
  std::mt19937_64 rng(7);
  HostTensor x = Random({3, 5}, rng, -3.0, 3.0);
  auto out = RunOp(OpKind::kLogSoftmax, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  HostTensor want = NaiveSoftmax(x);
  for (double& v : want.data) v = std::log(v);
  ExpectAllNear((*out)[0], want, 1e-13);
}

// softmax_grad(y, dy) is the vector-Jacobian product of softmax at y = softmax(x).
TEST(ReduceOpsTest, SoftmaxGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(8);
  HostTensor x = Random({2, 4}, rng);
  HostTensor dy = Random({2, 4}, rng);
  auto dot = [&](const HostTensor& v) {
    double s = 0.0;
    HostTensor y = NaiveSoftmax(v);
    for (int64_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
    return s;
  };
  auto dx = RunOp(OpKind::kSoftmaxGrad, {NaiveSoftmax(x), dy});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ExpectAllNear((*dx)[0], NumericGradient(dot, x), 1e-8);
}

// log_softmax_grad(y, dy) is the vector-Jacobian product of log_softmax at y.
TEST(ReduceOpsTest, LogSoftmaxGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(9);
  HostTensor x = Random({3, 3}, rng);
  HostTensor dy = Random({3, 3}, rng);
  auto dot = [&](const HostTensor& v) {
    double s = 0.0;
    HostTensor y = NaiveSoftmax(v);
    for (int64_t i = 0; i < y.size(); ++i) s += std::log(y[i]) * dy[i];
    return s;
  };
  HostTensor y = NaiveSoftmax(x);
  for (double& v : y.data) v = std::log(v);
  auto dx = RunOp(OpKind::kLogSoftmaxGrad, {y, dy});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ExpectAllNear((*dx)[0], NumericGradient(dot, x), 1e-8);
}

// The softmax family fixes the last label and needs rank >= 1 and matching grad inputs.
TEST(ReduceOpsTest, SoftmaxFixesLastDim) {
  EXPECT_EQ(Signature(OpKind::kSoftmax, {F64({2, 3, 4})}), "d0 d1 d2 -> d0 d1 d2 | d2:fixed");
  EXPECT_EQ(Signature(OpKind::kLogSoftmaxGrad, {F64({2, 3}), F64({2, 3})}),
            "d0 d1, d0 d1 -> d0 d1 | d1:fixed");
  EXPECT_EQ(InferError(OpKind::kSoftmax, {F64({})}), "input 0 has 0 dims, expected at least 1");
  EXPECT_EQ(InferError(OpKind::kSoftmaxGrad, {F64({2, 3}), F64({3, 2})}),
            "input 1 is f64[3,2], expected f64[2,3] like input 0");
}

// The forward rules differentiate through the grad ops, which read the forward output.
TEST(ReduceOpsTest, SoftmaxGradientReadsForwardOutput) {
  for (auto [fwd, bwd] : {std::pair{OpKind::kSoftmax, OpKind::kSoftmaxGrad},
                          std::pair{OpKind::kLogSoftmax, OpKind::kLogSoftmaxGrad}}) {
    Graph g("softmax_grad");
    TensorId x = *g.AddInput("x", Shape({2, 3}), DType::kF64, TensorRole::kInput);
    auto y = g.AddOp(fwd, {x}, {}, OpInfo{}, {{"y"}});
    ASSERT_TRUE(y.ok()) << y.status();
    auto loss = g.AddOp(OpKind::kSumSquares, {(*y)[0]}, {}, OpInfo{}, {{"loss"}});
    ASSERT_TRUE(loss.ok()) << loss.status();
    auto grads = AppendBackward(g, (*loss)[0], {x});
    ASSERT_TRUE(grads.ok()) << grads.status();
    const Op& op = g.op(g.tensor(*(*grads)[0]).producer);
    EXPECT_EQ(op.kind, bwd);
    EXPECT_EQ(op.inputs[0], (*y)[0]);
  }
}

// ---- cross_entropy ---------------------------------------------------------------------

// cross_entropy is the mean over positions of -log(softmax(logits)[target]).
TEST(ReduceOpsTest, CrossEntropyIsMeanNegativeLogLikelihood) {
  std::mt19937_64 rng(10);
  HostTensor logits = Random({2, 3, 5}, rng, -2.0, 2.0);
  HostTensor targets = Make({2, 3}, {0, 4, 2, 1, 3, 4}, DType::kI64);
  auto out = RunOp(OpKind::kCrossEntropy, {logits, targets});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].shape.rank(), 0);
  HostTensor p = NaiveSoftmax(logits);
  double want = 0.0;
  for (int r = 0; r < 6; ++r) want -= std::log(p[r * 5 + static_cast<int>(targets[r])]) / 6.0;
  EXPECT_NEAR((*out)[0][0], want, 1e-13);
}

// A target outside [0, V) is a kernel error naming its position.
TEST(ReduceOpsTest, CrossEntropyRejectsTargetOutsideVocabulary) {
  HostTensor logits(Shape({2, 3, 5}), DType::kF64);
  HostTensor too_big = Make({2, 3}, {0, 1, 2, 3, 4, 5}, DType::kI64);
  auto out = RunOp(OpKind::kCrossEntropy, {logits, too_big});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("target 5 at position [1,2] is outside the "
                                        "vocabulary [0, 5)"),
            std::string::npos)
      << out.status();
  HostTensor negative = Make({2, 3}, {0, -1, 2, 3, 4, 0}, DType::kI64);
  auto grad = RunOp(OpKind::kCrossEntropyGrad,
                    {logits, negative, Make({}, {1.0})});
  ASSERT_FALSE(grad.ok());
  EXPECT_NE(grad.status().message().find("target -1 at position [0,1]"), std::string::npos)
      << grad.status();
}

// Logits need rank >= 1, targets integers with the leading dims, dloss a scalar.
TEST(ReduceOpsTest, CrossEntropyRejectsMismatchedInputs) {
  EXPECT_EQ(InferError(OpKind::kCrossEntropy, {F64({2, 3, 5}), F64({2, 3})}),
            "input 1 has dtype f64, expected an integer type");
  EXPECT_EQ(InferError(OpKind::kCrossEntropy, {F64({2, 3, 5}), I64({2, 4})}),
            "input 1 is i64[2,4], expected dims [2,3]");
  EXPECT_EQ(InferError(OpKind::kCrossEntropy, {F64({}), I64({})}),
            "input 0 has 0 dims, expected at least 1");
  EXPECT_EQ(InferError(OpKind::kCrossEntropy, {F64({0, 5}), I64({0})}),
            "input 1 has no elements; the mean loss needs at least one position");
  EXPECT_EQ(InferError(OpKind::kCrossEntropyGrad, {F64({2, 5}), I64({2}), F64({1})}),
            "input 2 is f64[1], expected a scalar");
  auto out = InferOutputTypes(OpKind::kCrossEntropy, {F64({4, 5}), I64({4})}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ToString(), "f64[]");
}

// cross_entropy_grad is dloss times the gradient of the mean loss w.r.t. the logits.
TEST(ReduceOpsTest, CrossEntropyGradMatchesFiniteDifferences) {
  std::mt19937_64 rng(11);
  HostTensor logits = Random({2, 2, 4}, rng);
  HostTensor targets = Make({2, 2}, {3, 0, 1, 1}, DType::kI64);
  const double dloss = 0.7;
  auto loss = [&](const HostTensor& l) {
    auto out = RunOp(OpKind::kCrossEntropy, {l, targets});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? dloss * (*out)[0][0] : 0.0;
  };
  auto dx = RunOp(OpKind::kCrossEntropyGrad, {logits, targets, Make({}, {dloss})});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ExpectAllNear((*dx)[0], NumericGradient(loss, logits), 1e-8);
}

// The loss differentiates into cross_entropy_grad; the targets get no gradient.
TEST(ReduceOpsTest, CrossEntropyGradientSkipsTargets) {
  Graph g("ce");
  TensorId logits = *g.AddInput("logits", Shape({2, 5}), DType::kF64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", Shape({2}), DType::kI64, TensorRole::kInput);
  auto loss = g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {}, OpInfo{},
                      {{"loss", TensorRole::kLoss}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto grads = AppendBackward(g, (*loss)[0], {logits, targets});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_TRUE((*grads)[0].has_value());
  EXPECT_EQ(g.op(g.tensor(*(*grads)[0]).producer).kind, OpKind::kCrossEntropyGrad);
  EXPECT_FALSE((*grads)[1].has_value());
}

// The vocab label is fixed; token labels reduce in the loss and are spatial in its gradient.
TEST(ReduceOpsTest, CrossEntropySplitsTokensAndFixesTheVocab) {
  EXPECT_EQ(Signature(OpKind::kCrossEntropy, {F64({2, 3, 5}), I64({2, 3})}),
            "d0 d1 d2, d0 d1 ->  | d0:reduce d1:reduce d2:fixed");
  EXPECT_EQ(Signature(OpKind::kCrossEntropyGrad, {F64({2, 5}), I64({2}), F64({})}),
            "d0 d1, d0,  -> d0 d1 | d1:fixed");
}

// With `count` the loss is the summed NLL divided by count, and its gradient uses the
// same divisor; a count below 1 is rejected.
TEST(ReduceOpsTest, CrossEntropyDividesByCount) {
  std::mt19937_64 rng(12);
  HostTensor logits = Random({3, 4}, rng);
  HostTensor targets = Make({3}, {2, 0, 3}, DType::kI64);
  HostTensor p = NaiveSoftmax(logits);
  double nll = 0.0;
  for (int r = 0; r < 3; ++r) nll -= std::log(p[r * 4 + static_cast<int>(targets[r])]);
  auto loss = RunOp(OpKind::kCrossEntropy, {logits, targets}, {{"count", int64_t{10}}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_NEAR((*loss)[0][0], nll / 10.0, 1e-13);
  auto grad = RunOp(OpKind::kCrossEntropyGrad, {logits, targets, Make({}, {2.0})},
                    {{"count", int64_t{10}}});
  ASSERT_TRUE(grad.ok()) << grad.status();
  for (int r = 0; r < 3; ++r) {
    for (int j = 0; j < 4; ++j) {
      double onehot = j == static_cast<int>(targets[r]) ? 1.0 : 0.0;
      EXPECT_NEAR((*grad)[0][r * 4 + j], (p[r * 4 + j] - onehot) * 2.0 / 10.0, 1e-13);
    }
  }
  EXPECT_EQ(InferError(OpKind::kCrossEntropy, {F64({2, 5}), I64({2})}, {{"count", int64_t{0}}}),
            "attribute 'count' is 0, expected at least 1");
  EXPECT_EQ(
      InferError(OpKind::kCrossEntropyGrad, {F64({2, 5}), I64({2}), F64({})}, {{"count", 2.0}}),
      "attribute 'count' must be an integer");
}

// The loss's gradient rule passes its count on to cross_entropy_grad.
TEST(ReduceOpsTest, CrossEntropyGradientKeepsCount) {
  Graph g("ce");
  TensorId logits = *g.AddInput("logits", Shape({2, 5}), DType::kF64, TensorRole::kInput);
  TensorId targets = *g.AddInput("targets", Shape({2}), DType::kI64, TensorRole::kInput);
  auto loss = g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {{"count", int64_t{8}}}, OpInfo{},
                      {{"loss", TensorRole::kLoss}});
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto grads = AppendBackward(g, (*loss)[0], {logits, targets});
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_TRUE((*grads)[0].has_value());
  const Op& grad_op = g.op(g.tensor(*(*grads)[0]).producer);
  EXPECT_EQ(grad_op.kind, OpKind::kCrossEntropyGrad);
  EXPECT_EQ(grad_op.attrs.ToString(), "{count=8}");
}

// Positions [begin, end) along dim 1 of a [b, s, ...] tensor.
HostTensor TokenSlice(const HostTensor& t, int64_t begin, int64_t end) {
  std::vector<int64_t> dims = t.shape.dims();
  const int64_t s = dims[1];
  int64_t inner = 1;
  for (size_t d = 2; d < dims.size(); ++d) inner *= dims[d];
  dims[1] = end - begin;
  HostTensor out(Shape(dims), t.dtype);
  int64_t o = 0;
  for (int64_t b = 0; b < dims[0]; ++b) {
    for (int64_t k = begin; k < end; ++k) {
      for (int64_t i = 0; i < inner; ++i) out[o++] = t[(b * s + k) * inner + i];
    }
  }
  return out;
}

// Splitting the sequence dim in two: the loss pieces, with the count shard_attrs
// gives them (the logical position count), sum to the full loss, and the gradient
// pieces are the matching slices of the full gradient.
TEST(ReduceOpsTest, CrossEntropyTokenHalvesRebuildTheFullLossAndGradient) {
  std::mt19937_64 rng(13);
  HostTensor logits = Random({2, 4, 5}, rng);
  HostTensor targets = Make({2, 4}, {4, 0, 2, 1, 3, 3, 0, 2}, DType::kI64);
  HostTensor dloss = Make({}, {0.6});
  auto full_loss = RunOp(OpKind::kCrossEntropy, {logits, targets});
  auto full_grad = RunOp(OpKind::kCrossEntropyGrad, {logits, targets, dloss});
  ASSERT_TRUE(full_loss.ok()) << full_loss.status();
  ASSERT_TRUE(full_grad.ok()) << full_grad.status();
  const OpSchema& loss_schema = GetOpSchema(OpKind::kCrossEntropy);
  const OpSchema& grad_schema = GetOpSchema(OpKind::kCrossEntropyGrad);
  ASSERT_NE(loss_schema.shard_attrs, nullptr);
  ASSERT_NE(grad_schema.shard_attrs, nullptr);
  const std::vector<TensorType> in = {F64({2, 4, 5}), I64({2, 4}), F64({})};
  double loss_sum = 0.0;
  for (int64_t begin : {0, 2}) {
    const int64_t end = begin + 2;
    const std::vector<Box> in_boxes = {Box{{0, 2}, {begin, end}, {0, 5}}, Box{{0, 2}, {begin, end}},
                                       Box{}};
    auto loss_attrs =
        loss_schema.shard_attrs({}, absl::MakeConstSpan(in).subspan(0, 2),
                                absl::MakeConstSpan(in_boxes).subspan(0, 2), {F64({})}, {Box{}});
    ASSERT_TRUE(loss_attrs.ok()) << loss_attrs.status();
    EXPECT_EQ(loss_attrs->ToString(), "{count=8}");
    auto grad_attrs = grad_schema.shard_attrs({}, in, in_boxes, {F64({2, 4, 5})}, {in_boxes[0]});
    ASSERT_TRUE(grad_attrs.ok()) << grad_attrs.status();
    EXPECT_EQ(grad_attrs->ToString(), "{count=8}");

    HostTensor piece_logits = TokenSlice(logits, begin, end);
    HostTensor piece_targets = TokenSlice(targets, begin, end);
    auto loss = RunOp(OpKind::kCrossEntropy, {piece_logits, piece_targets}, *loss_attrs);
    ASSERT_TRUE(loss.ok()) << loss.status();
    loss_sum += (*loss)[0][0];
    auto grad = RunOp(OpKind::kCrossEntropyGrad, {piece_logits, piece_targets, dloss}, *grad_attrs);
    ASSERT_TRUE(grad.ok()) << grad.status();
    ExpectAllNear((*grad)[0], TokenSlice((*full_grad)[0], begin, end), 1e-15);
  }
  EXPECT_NEAR(loss_sum, (*full_loss)[0][0], 1e-14);
}

// shard_attrs keeps a count the op already has.
TEST(ReduceOpsTest, CrossEntropyShardAttrsKeepAnExplicitCount) {
  const OpSchema& schema = GetOpSchema(OpKind::kCrossEntropy);
  ASSERT_NE(schema.shard_attrs, nullptr);
  auto attrs = schema.shard_attrs({{"count", int64_t{64}}}, {F64({4, 5}), I64({4})},
                                  {Box{{0, 2}, {0, 5}}, Box{{0, 2}}}, {F64({})}, {Box{}});
  ASSERT_TRUE(attrs.ok()) << attrs.status();
  EXPECT_EQ(attrs->ToString(), "{count=64}");
}

// ---- FLOPs -----------------------------------------------------------------------------

// FLOPs scale with the elements read (reductions) or written (softmax family).
TEST(ReduceOpsTest, FlopsCountElements) {
  EXPECT_EQ(Flops(OpKind::kSum, {F64({2, 3, 4})}, {{"dims", Ints{1}}}), 24.0);
  EXPECT_EQ(Flops(OpKind::kMean, {F64({2, 3, 4})}, {{"dims", Ints{1}}}), 24.0 + 8.0);
  EXPECT_EQ(Flops(OpKind::kSumSquares, {F64({2, 3})}), 12.0);
  EXPECT_EQ(Flops(OpKind::kSoftmax, {F64({2, 3})}), 30.0);
  EXPECT_EQ(Flops(OpKind::kCrossEntropy, {F64({2, 5}), I64({2})}), 60.0);
}

}  // namespace
}  // namespace loom::ir
