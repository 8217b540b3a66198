// A mean over a dim the plan splits (DTensor's mean of a Shard along the averaged
// dim, a Partial(avg) value): each device averages its own columns, dividing by
// its own count, so it holds its share of the mean times the whole count over its
// own. The piece's `count` says what it divides by; the derivation reads the factor
// off it, so an average over the devices is the mean, and a sum twice it.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "tests/verify/hand_plan_testutil.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::Rational;
using ir::ValueId;
using testing::Failures;
using testing::HandPlan;
using testing::VerifyHandPlan;

// The mean of each row of x over its 6 columns, then its exponential.
constexpr char kSpec[] = R"(
graph "row_mean" {
  %x = input f64[4,6]
  %m = mean(%x) {dims=[1]} : f64[4] @forward
  %e = exp(%m) : f64[4] @forward
  output %m
  output %e
}
)";

struct Options {
  int64_t count = 3;  // what each device's mean divides by (its own 3 columns)
  Rational claim = Rational::Of(2, 1);  // the factor its mean claims on its share
  ir::ReduceOp reduce = ir::ReduceOp::kAvg;
};

// Tensors: x 0, m 1, e 2. Ops: mean 0, exp 1. Device d holds columns [3d, 3d + 3).
ir::Plan ColumnSplitMean(const Options& o) {
  HandPlan b(ir::Mesh({ir::MeshAxis{"tp", 2}}));
  ir::Collective reduce;
  reduce.id = 0;
  reduce.reduce = o.reduce;
  reduce.devices = {0, 1};
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId x = b.Value(d, 0, Box{{0, 4}, {3 * d, 3 * d + 3}}, "full");
    const ValueId m = b.Value(d, 1, Box{{0, 4}}, d == 0 ? "[0,1/2)" : "[1/2,1)", o.claim);
    b.Task(d, 0, ir::OpKind::kMean, {x}, {m},
           ir::AttrMap({{"dims", std::vector<int64_t>{1}}, {"count", o.count}}));
    reduce.inputs.push_back(m);
  }
  for (int64_t d = 0; d < 2; ++d) reduce.outputs.push_back(b.Value(d, 1, Box{{0, 4}}, "full"));
  b.plan.collectives.push_back(reduce);
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId e = b.Value(d, 2, Box{{0, 4}}, "full");
    b.Task(d, 1, ir::OpKind::kExp, {reduce.outputs[d]}, {e});
    b.plan.outputs.push_back(reduce.outputs[d]);
    b.plan.outputs.push_back(e);
  }
  return std::move(b.plan);
}

VerifyReport VerifyPlan(const ir::Plan& plan) { return VerifyHandPlan(kSpec, plan); }

TEST(MeanPiecesTest, EachDevicesMeanOfItsColumnsAveragedIsTheMean) {
  const VerifyReport r = VerifyPlan(ColumnSplitMean({}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

TEST(MeanPiecesTest, EachDevicesMeanOfItsColumnsSummedIsTwiceTheMean) {
  Options o;
  o.reduce = ir::ReduceOp::kSum;
  const VerifyReport r = VerifyPlan(ColumnSplitMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
  EXPECT_NE(r.failures[0].message.find("scaled by 2"), std::string::npos) << Failures(r);
}

TEST(MeanPiecesTest, PiecesDividingByTheWholeCountAreItsPartialSums) {
  Options o;
  o.count = 6;
  o.claim = Rational::One();
  o.reduce = ir::ReduceOp::kSum;
  const VerifyReport r = VerifyPlan(ColumnSplitMean(o));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

TEST(MeanPiecesTest, AClaimWithoutTheFactorOfTheOwnCountIsRefuted) {
  Options o;
  o.claim = Rational::One();  // the device's mean claimed as its plain share
  const VerifyReport r = VerifyPlan(ColumnSplitMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
}

// The row mean minus a value every device holds whole (label smoothing's mean
// log-probability: the mean of the logits minus their log-sum-exp). DTensor keeps
// mean - r Partial(avg): each device's mean of its columns minus r is twice its
// share of the result, r being twice its even share (half of it).
constexpr char kCenteredSpec[] = R"(
graph "centered_row_mean" {
  %x = input f64[4,6]
  %r = input f64[4]
  %m = mean(%x) {dims=[1]} : f64[4] @forward
  %d = sub(%m, %r) : f64[4] @forward
  output %d
}
)";

struct CenteredOptions {
  int64_t count = 3;
  Rational claim = Rational::Of(2, 1);  // the factor the mean and the difference claim
  ir::ReduceOp reduce = ir::ReduceOp::kAvg;
};

// Tensors: x 0, r 1, m 2, d 3. Ops: mean 0, sub 1.
ir::Plan CenteredColumnSplitMean(const CenteredOptions& o) {
  HandPlan b(ir::Mesh({ir::MeshAxis{"tp", 2}}));
  ir::Collective reduce;
  reduce.id = 0;
  reduce.reduce = o.reduce;
  reduce.devices = {0, 1};
  for (int64_t d = 0; d < 2; ++d) {
    const std::string half = d == 0 ? "[0,1/2)" : "[1/2,1)";
    const ValueId x = b.Value(d, 0, Box{{0, 4}, {3 * d, 3 * d + 3}}, "full");
    const ValueId r = b.Value(d, 1, Box{{0, 4}}, "full");
    const ValueId m = b.Value(d, 2, Box{{0, 4}}, half, o.claim);
    b.Task(d, 0, ir::OpKind::kMean, {x}, {m},
           ir::AttrMap({{"dims", std::vector<int64_t>{1}}, {"count", o.count}}));
    const ValueId diff = b.Value(d, 3, Box{{0, 4}}, half, o.claim);
    b.Task(d, 1, ir::OpKind::kSub, {m, r}, {diff});
    reduce.inputs.push_back(diff);
  }
  for (int64_t d = 0; d < 2; ++d) {
    reduce.outputs.push_back(b.Value(d, 3, Box{{0, 4}}, "full"));
    b.plan.outputs.push_back(reduce.outputs.back());
  }
  b.plan.collectives.push_back(reduce);
  return std::move(b.plan);
}

VerifyReport VerifyCentered(const ir::Plan& plan) { return VerifyHandPlan(kCenteredSpec, plan); }

TEST(MeanPiecesTest, AReplicatedValueSubtractedFromEachMeanAveragesToTheDifference) {
  const VerifyReport r = VerifyCentered(CenteredColumnSplitMean({}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

TEST(MeanPiecesTest, TheDifferencesSummedCountTheReplicatedValueTwice) {
  CenteredOptions o;
  o.reduce = ir::ReduceOp::kSum;
  const VerifyReport r = VerifyCentered(CenteredColumnSplitMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent) << Failures(r);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
}

TEST(MeanPiecesTest, PartialSumsMinusAReplicatedValueSubtractItOnEveryDevice) {
  // Pieces dividing by the whole count are partial sums (Partial(sum)): each
  // device subtracting r whole, their sum subtracts it twice.
  CenteredOptions o;
  o.count = 6;
  o.claim = Rational::One();
  o.reduce = ir::ReduceOp::kSum;
  const VerifyReport r = VerifyCentered(CenteredColumnSplitMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent) << Failures(r);
}

}  // namespace
}  // namespace loom::verify
