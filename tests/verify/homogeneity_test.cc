// Every homogeneous group the derivation relies on (verify/homogeneity.h), checked
// on the reference kernels: scaling the group's operands by k scales every output
// by k^exponent, on every sample of the op (tests/ir/op_samples.h).

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/host_tensor.h"
#include "ir/op_schema.h"
#include "tests/ir/op_samples.h"
#include "verify/homogeneity.h"

namespace loom::verify {
namespace {

using ir::HostTensor;

TEST(HomogeneityTest, EveryGroupScalesItsOutputsOnTheReferenceKernels) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (const ir::testing::OpSample& sample : ir::testing::AllSamples(11)) {
    std::vector<HostTensor> inputs = ir::testing::SampleInputs(sample, rng);
    auto out_types = ir::InferOutputTypes(sample.kind, sample.inputs, sample.attrs);
    ASSERT_TRUE(out_types.ok()) << sample.label << ": " << out_types.status();
    auto base = ir::testing::RunOp(sample.kind, inputs, sample.attrs);
    ASSERT_TRUE(base.ok()) << sample.label << ": " << base.status();
    for (const Homogeneity& g :
         HomogeneousGroups(sample.kind, sample.inputs, *out_types)) {
      const double k = 3.0;
      std::vector<HostTensor> scaled = inputs;
      for (int i : g.positions) {
        for (int64_t e = 0; e < scaled[i].size(); ++e) scaled[i][e] *= k;
      }
      auto out = ir::testing::RunOp(sample.kind, scaled, sample.attrs);
      ASSERT_TRUE(out.ok()) << sample.label << ": " << out.status();
      const double factor = std::pow(k, g.exponent);
      const std::string where = absl::StrCat(ir::OpKindName(sample.kind), " '", sample.label,
                                             "', group of ", g.positions.size(),
                                             " starting at operand ", g.positions[0]);
      for (size_t o = 0; o < out->size(); ++o) {
        const HostTensor& got = (*out)[o];
        const HostTensor& want = (*base)[o];
        if (!ir::IsFloat(want.dtype)) continue;  // indices, masks: not scaled
        for (int64_t e = 0; e < got.size(); ++e) {
          const double expect = want[e] * factor;
          ASSERT_NEAR(got[e], expect, 1e-9 * (1 + std::abs(expect)))
              << where << ": output " << o << " element " << e;
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

// A cast is the identity over the reals where it makes a float, from a float or from
// an integer (a rank's token count, a share of the batch's, made a float to divide
// the loss): a scaled count stays scaled. Truncating to an integer, or a bool made a
// number, is not linear.
TEST(HomogeneityTest, CastIsLinearWhereItMakesAFloat) {
  auto type = [](ir::DType dtype) { return ir::TensorType{ir::Shape({}), dtype}; };
  auto groups = [&](ir::DType from, ir::DType to) {
    return LinearGroups(ir::OpKind::kCast, {type(from)}, {type(to)});
  };
  const std::vector<std::vector<int>> first = {{0}};
  EXPECT_EQ(groups(ir::DType::kI64, ir::DType::kF32), first);
  EXPECT_EQ(groups(ir::DType::kF32, ir::DType::kBF16), first);
  EXPECT_TRUE(groups(ir::DType::kF32, ir::DType::kI64).empty());
  EXPECT_TRUE(groups(ir::DType::kI64, ir::DType::kI32).empty());
  EXPECT_TRUE(groups(ir::DType::kBool, ir::DType::kF32).empty());
  const ir::Rational half = ir::Rational::Of(1, 2);
  PieceScale count = ScaleOfPiece(ir::OpKind::kCast, {type(ir::DType::kI64)},
                                  {type(ir::DType::kF32)}, {half}, {0});
  EXPECT_EQ(count.operand, -1) << count.why;
  EXPECT_EQ(count.factor, half);
}

// A complete operand meeting Partial(avg) pieces (one of n equal members' shares
// held n times) in a linear group is read as n times its even share; one meeting
// Partial(sum) pieces, shares of another size, or pieces of another group is not.
TEST(HomogeneityTest, CompleteOperandsMeetingAverageSharesAreEvenShares) {
  const ir::TensorType row{ir::Shape({4}), ir::DType::kF64};
  const std::vector<ir::TensorType> in = {row, row};
  const std::vector<ir::TensorType> out = {row};
  const ir::Rational two = ir::Rational::Of(2, 1);
  const ir::Rational one = ir::Rational::One();
  const std::vector<char> none = {0, 0};
  EvenShares sub = EvenShareFactors(ir::OpKind::kSub, in, out, {two, one}, none, {2, 0});
  EXPECT_EQ(sub.factor, (std::vector<ir::Rational>{two, two}));
  EXPECT_EQ(sub.even, (std::vector<char>{0, 1}));
  EXPECT_TRUE(ScaleOfPiece(ir::OpKind::kSub, in, out, sub.factor, none).operand < 0);
  // Partial(sum) pieces (held once): the complete operand stays as it is.
  EvenShares summed = EvenShareFactors(ir::OpKind::kSub, in, out, {one, one}, none, {2, 0});
  EXPECT_EQ(summed.even, (std::vector<char>{0, 0}));
  // Held 4 times, one of 2 members: no average.
  const ir::Rational four = ir::Rational::Of(4, 1);
  EvenShares other = EvenShareFactors(ir::OpKind::kSub, in, out, {four, one}, none, {2, 0});
  EXPECT_EQ(other.factor, (std::vector<ir::Rational>{four, one}));
  // mul is linear in each operand alone: a complete factor scales nothing.
  EvenShares mul = EvenShareFactors(ir::OpKind::kMul, in, out, {two, one}, none, {2, 0});
  EXPECT_EQ(mul.even, (std::vector<char>{0, 0}));
}

}  // namespace
}  // namespace loom::verify
