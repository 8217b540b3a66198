// Share claims where they meet. A matmul split along its contracted dim over two
// devices gives two partial sums; an all-reduce adds them. The derivation finds
// the sum right whatever the partial values claim, so the claims are checked on
// their own: shares that overlap, shares that leave a gap, a result claiming a
// share no sum makes, and plan outputs claimed as shares are wrong claims even
// though the numbers are right.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "ir/text_format.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::ValueId;

constexpr char kSpec[] = R"(
graph "contracted" {
  %x = input f64[2,4]
  %w = input f64[4,3]
  %y = matmul(%x, %w) : f64[2,3] @forward
  output %y
}
)";

// Device d multiplies columns [2d, 2d+2) of x by rows [2d, 2d+2) of w; its
// product claims `partial[d]`; the all-reduce's result on device d claims
// `summed[d]`.
ir::Plan PlanOf(const std::vector<std::string>& partial, const std::vector<std::string>& summed) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"tp", 2}});
  auto value = [&](int64_t device, ir::TensorId tensor, Box box, const std::string& part) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan.values.size());
    v.device = device;
    v.sub = ir::SubTensor{tensor, std::move(box)};
    v.sub.part = *ir::ValuePart::Parse(part);
    v.dtype = ir::DType::kF64;
    plan.values.push_back(std::move(v));
    return plan.values.back().id;
  };
  ir::Collective sum;
  sum.id = 0;
  sum.devices = {0, 1};
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId x = value(d, 0, Box{{0, 2}, {2 * d, 2 * d + 2}}, "full");
    const ValueId w = value(d, 1, Box{{2 * d, 2 * d + 2}, {0, 3}}, "full");
    const ValueId y = value(d, 2, Box{{0, 2}, {0, 3}}, partial[d]);
    ir::Task task;
    task.id = static_cast<int>(plan.tasks.size());
    task.op = 0;
    task.kind = ir::OpKind::kMatMul;
    task.device = d;
    task.inputs = {x, w};
    task.outputs = {y};
    plan.tasks.push_back(std::move(task));
    sum.inputs.push_back(y);
  }
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId out = value(d, 2, Box{{0, 2}, {0, 3}}, summed[d]);
    sum.outputs.push_back(out);
    plan.outputs.push_back(out);
  }
  plan.collectives.push_back(std::move(sum));
  return plan;
}

VerifyReport VerifyPlan(const ir::Plan& plan) {
  auto spec = ir::ParseGraph(kSpec, "contracted.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ir::ValidatePlan(*spec, plan).ok()) << ir::ValidatePlan(*spec, plan);
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

void ExpectWrongClaim(const ir::Plan& plan, const std::string& words) {
  const VerifyReport r = VerifyPlan(plan);
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kWrongClaim);
  EXPECT_NE(r.failures[0].message.find(words), std::string::npos) << r.failures[0].message;
}

TEST(ShareClaimTest, DisjointSharesMakingTheWholeAreProved) {
  EXPECT_EQ(VerifyPlan(PlanOf({"[0,1/2)", "[1/2,1)"}, {"full", "full"})).verdict,
            Verdict::kEquivalent);
  // Other names for the two halves, just as good.
  EXPECT_EQ(VerifyPlan(PlanOf({"[1/2,1)", "[0,1/4)+[1/4,1/2)"}, {"full", "full"})).verdict,
            Verdict::kEquivalent);
}

TEST(ShareClaimTest, OverlappingSharesAreAWrongClaim) {
  ExpectWrongClaim(PlanOf({"[0,1/2)", "[0,1/2)"}, {"full", "full"}), "overlap");
  ExpectWrongClaim(PlanOf({"[0,3/4)", "[1/2,1)"}, {"full", "full"}), "overlap");
}

TEST(ShareClaimTest, SharesLeavingAGapAreAWrongClaim) {
  ExpectWrongClaim(PlanOf({"[0,1/3)", "[1/2,1)"}, {"full", "full"}), "[0,1/3)+[1/2,1)");
}

TEST(ShareClaimTest, OutputsClaimedAsSharesAreAWrongClaim) {
  // The all-reduce's results are complete on both devices; claimed as halves of
  // a sum, whoever adds them up gets twice the value.
  ExpectWrongClaim(PlanOf({"[0,1/2)", "[1/2,1)"}, {"[0,1/2)", "[1/2,1)"}),
                   "plan outputs are read as complete values");
}

}  // namespace
}  // namespace loom::verify
