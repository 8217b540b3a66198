// Values a program scales on its way. A data-parallel rank normalises its partial
// sum by its own token count, so it holds its share of the mean times the ranks'
// count over its own; an average over the ranks (or a sum and a division) brings
// that back to the whole mean. The derivation carries the factor exactly: through
// ops proportional to the scaled operand, into sums of values scaled alike, and
// refutes a value whose factor differs from its claim, a sum of values scaled
// differently (ranks counting different numbers of tokens), and a scaled value
// read where the op is not proportional to it.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "ir/text_format.h"
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

// The mean over 4 rows of x (a count n of 4 rows, given), then its exponential.
constexpr char kSpec[] = R"(
graph "mean" {
  %x = input f64[4,3]
  %n = input f64[]
  %s = sum(%x) {dims=[0]} : f64[3] @forward
  %m = div_scalar(%s, %n) : f64[3] @forward
  %e = exp(%m) : f64[3] @forward
  output %m
  output %e
}
)";

struct Options {
  // The count each of the two devices divides by, as a multiple of n.
  Rational count[2] = {Rational::Of(1, 2), Rational::Of(1, 2)};
  ir::ReduceOp reduce = ir::ReduceOp::kAvg;
  double glue = 0;  // > 0: a local scale by it after the all-reduce
  // The factor each division's result claims (its share of the mean).
  Rational divided_claim[2] = {Rational::Of(2, 1), Rational::Of(2, 1)};
};

// Tensors: x 0, n 1, s 2, m 3, e 4. Ops: sum 0, div_scalar 1, exp 2.
ir::Plan DataParallelMean(const Options& o) {
  HandPlan b(ir::Mesh({ir::MeshAxis{"dp", 2}}));
  ir::Collective reduce;
  reduce.id = 0;
  reduce.reduce = o.reduce;
  reduce.devices = {0, 1};
  for (int64_t d = 0; d < 2; ++d) {
    const std::string half = d == 0 ? "[0,1/2)" : "[1/2,1)";
    const ValueId x = b.Value(d, 0, Box{{2 * d, 2 * d + 2}, {0, 3}}, "full");
    const ValueId n = b.Value(d, 1, Box{}, "full", o.count[d]);
    const ValueId s = b.Value(d, 2, Box{{0, 3}}, half);
    b.Task(d, 0, ir::OpKind::kSum, {x}, {s}, ir::AttrMap({{"dims", std::vector<int64_t>{0}}}));
    const ValueId m = b.Value(d, 3, Box{{0, 3}}, half, o.divided_claim[d]);
    b.Task(d, 1, ir::OpKind::kDivScalar, {s, n}, {m});
    reduce.inputs.push_back(m);
  }
  std::vector<ValueId> reduced;
  for (int64_t d = 0; d < 2; ++d) {
    const Rational held = o.glue > 0 ? Rational::Of(2, 1) : Rational::One();
    reduced.push_back(b.Value(d, 3, Box{{0, 3}}, "full", held));
  }
  reduce.outputs = reduced;
  b.plan.collectives.push_back(reduce);
  for (int64_t d = 0; d < 2; ++d) {
    ValueId m = reduced[d];
    if (o.glue > 0) {
      const ValueId scaled = b.Value(d, 3, Box{{0, 3}}, "full");
      b.Task(d, ir::kNoId, ir::OpKind::kScale, {m}, {scaled},
             ir::AttrMap({{"factor", o.glue}}));
      m = scaled;
    }
    const ValueId e = b.Value(d, 4, Box{{0, 3}}, "full");
    b.Task(d, 2, ir::OpKind::kExp, {m}, {e});
    b.plan.outputs.push_back(m);
    b.plan.outputs.push_back(e);
  }
  return std::move(b.plan);
}

VerifyReport VerifyPlan(const ir::Plan& plan) { return VerifyHandPlan(kSpec, plan); }

TEST(ScaledLineageTest, EachRanksMeanAveragedIsTheMean) {
  const VerifyReport r = VerifyPlan(DataParallelMean({}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

TEST(ScaledLineageTest, EachRanksMeanSummedIsTwiceTheMean) {
  Options o;
  o.reduce = ir::ReduceOp::kSum;
  const VerifyReport r = VerifyPlan(DataParallelMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
  EXPECT_NE(r.failures[0].message.find("scaled by 2)"), std::string::npos) << Failures(r);
  EXPECT_FALSE(r.failures[0].counterexample.empty());
}

TEST(ScaledLineageTest, SummedThenDividedByTheRanksIsTheMean) {
  Options o;
  o.reduce = ir::ReduceOp::kSum;
  o.glue = 0.5;
  const VerifyReport r = VerifyPlan(DataParallelMean(o));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent) << Failures(r);
}

TEST(ScaledLineageTest, DividedTwiceIsHalfTheMeanWhereTheNonlinearOpReadsIt) {
  Options o;
  o.reduce = ir::ReduceOp::kAvg;
  o.glue = 0.5;  // the average, then half of it again
  ir::Plan plan = DataParallelMean(o);
  // The all-reduce's results hold the mean itself now (scale 1); the scaled
  // copies claim the mean too: wrong by 1/2 at the scale.
  for (ir::PlanValue& v : plan.values) {
    if (v.sub.tensor == 3 && v.sub.part.IsFull()) v.sub.scale = Rational::One();
  }
  const VerifyReport r = VerifyPlan(plan);
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
  EXPECT_NE(r.failures[0].message.find("scaled by 1/2)"), std::string::npos) << Failures(r);
}

TEST(ScaledLineageTest, RanksCountingDifferentTokensDoNotAverageToTheMean) {
  // Device 0 counts 3 of the 4 rows' tokens, device 1 counts 1: each mean is its
  // sum over its own count, and their average weighs device 1's rows three times
  // as much as device 0's.
  Options o;
  o.count[0] = Rational::Of(3, 4);
  o.count[1] = Rational::Of(1, 4);
  o.divided_claim[0] = Rational::Of(4, 3);
  o.divided_claim[1] = Rational::Of(4, 1);
  const VerifyReport r = VerifyPlan(DataParallelMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
  EXPECT_NE(r.failures[0].message.find("scaled differently (by 4/3 and by 4)"),
            std::string::npos)
      << Failures(r);
}

TEST(ScaledLineageTest, AClaimThatLeavesOutTheFactorIsRefutedAtTheValue) {
  Options o;
  o.divided_claim[1] = Rational::One();
  const VerifyReport r = VerifyPlan(DataParallelMean(o));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kScaled) << Failures(r);
  EXPECT_NE(r.failures[0].message.find("where its claim says no factor (scaled by 2)"),
            std::string::npos)
      << Failures(r);
}

TEST(ScaledLineageTest, AScaledValueReadWhereTheOpIsNotProportionalToIt) {
  // exp reads the rank's own mean, twice the mean's share: no factor comes out.
  Options o;
  ir::Plan plan = DataParallelMean(o);
  for (ir::Task& t : plan.tasks) {
    if (t.kind != ir::OpKind::kExp) continue;
    // Read the division's result (2 times a share) instead of the average.
    for (const ir::Task& div : plan.tasks) {
      if (div.kind == ir::OpKind::kDivScalar && div.device == t.device) {
        t.inputs = {div.outputs[0]};
      }
    }
  }
  // The exp's inputs are half the tensor: give it the division's piece.
  for (ir::Task& t : plan.tasks) {
    if (t.kind != ir::OpKind::kExp) continue;
    plan.values[t.outputs[0]].sub.box = Box{{0, 3}};
  }
  const VerifyReport r = VerifyPlan(plan);
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  bool found = false;
  for (const Failure& f : r.failures) {
    found |= f.cls == FailureClass::kScaled &&
             f.message.find("is not proportional to it alone") != std::string::npos;
  }
  EXPECT_TRUE(found) << Failures(r);
}

TEST(ScaledLineageTest, ScalesAndAveragesRoundTripThroughJson) {
  Options o;
  o.count[0] = Rational::Of(3, 4);
  const ir::Plan plan = DataParallelMean(o);
  auto spec = ir::ParseGraph(kSpec, "mean.loom");
  ASSERT_TRUE(spec.ok());
  const std::string json = ir::PlanToJson(plan);
  EXPECT_NE(json.find("\"scale\":\"3/4\""), std::string::npos);
  EXPECT_NE(json.find("\"reduce\":\"avg\""), std::string::npos);
  auto back = ir::PlanFromJson(json, "mean.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == plan);
}

TEST(ScaledLineageTest, ExactRationalsOfDoubles) {
  EXPECT_EQ(ir::RationalOfDouble(0.5), Rational::Of(1, 2));
  EXPECT_EQ(ir::RationalOfDouble(1.0 / 3.0), Rational::Of(1, 3));
  EXPECT_EQ(ir::RationalOfDouble(-0.125), Rational::Of(-1, 8));
  EXPECT_EQ(ir::RationalOfDouble(22.0 / 6.0), Rational::Of(11, 3));
  EXPECT_EQ(ir::RationalOfDouble(3.0), Rational::Of(3, 1));
  EXPECT_FALSE(ir::RationalOfDouble(0.1234567891234).has_value());
}

}  // namespace
}  // namespace loom::verify
