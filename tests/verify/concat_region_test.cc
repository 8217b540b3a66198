// A pipeline stage's stack of its own parameters' norms. The spec stacks four
// values (each a one-element tensor) and takes the sum of squares of the stack;
// each of two devices holds two of them, concatenates them locally (claiming the
// rows of the spec's stack they are), takes the sum of squares of those rows (a
// share of the spec's) and an all-reduce completes it. A local concat holds the
// region of a spec concat's output only where its operands are consecutive inputs
// of that concat, whole, in order.

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
graph "stacked" {
  %x0 = input f64[1]
  %x1 = input f64[1]
  %x2 = input f64[1]
  %x3 = input f64[1]
  %s = concat(%x0, %x1, %x2, %x3) {dim=0} : f64[4] @backward
  %q = sum_squares(%s) : f64[] @backward
  output %q
}
)";

constexpr ir::TensorId kX0 = 0;  // %x1..%x3 follow
constexpr ir::TensorId kStack = 4;
constexpr ir::TensorId kSquares = 5;

struct Stacking {
  // The inputs device d concatenates, in order, the first row of the stack it claims
  // (as many as its inputs) and the share of the sum of squares it holds.
  std::vector<int> inputs[2] = {{0, 1}, {2, 3}};
  int64_t rows[2] = {0, 2};
  std::string share[2] = {"[0,1/2)", "[1/2,1)"};
};

ir::Plan PlanOf(const Stacking& s) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"pp", 2}});
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
  auto task = [&](int64_t device, ir::OpId op, ir::OpKind kind, std::vector<ValueId> in,
                  ValueId out) -> ir::Task& {
    ir::Task t;
    t.id = static_cast<int>(plan.tasks.size());
    t.op = op;
    t.kind = kind;
    t.device = device;
    t.inputs = std::move(in);
    t.outputs = {out};
    plan.tasks.push_back(std::move(t));
    return plan.tasks.back();
  };
  ir::Collective sum;
  sum.id = 0;
  sum.devices = {0, 1};
  for (int64_t d = 0; d < 2; ++d) {
    std::vector<ValueId> parts;
    for (int x : s.inputs[d]) parts.push_back(value(d, kX0 + x, Box{{0, 1}}, "full"));
    const int64_t count = static_cast<int64_t>(s.inputs[d].size());
    const ValueId rows = value(d, kStack, Box{{s.rows[d], s.rows[d] + count}}, "full");
    task(d, ir::kNoId, ir::OpKind::kConcat, parts, rows).attrs.Set("dim", int64_t{0});
    const ValueId squares = value(d, kSquares, Box{}, s.share[d]);
    task(d, 1, ir::OpKind::kSumSquares, {rows}, squares);
    sum.inputs.push_back(squares);
  }
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId out = value(d, kSquares, Box{}, "full");
    sum.outputs.push_back(out);
    plan.outputs.push_back(out);
  }
  plan.collectives.push_back(std::move(sum));
  return plan;
}

VerifyReport VerifyPlan(const ir::Plan& plan) {
  auto spec = ir::ParseGraph(kSpec, "stacked.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ir::ValidatePlan(*spec, plan).ok()) << ir::ValidatePlan(*spec, plan);
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

TEST(ConcatRegionTest, EachStagesRowsSquaredThenSummedAreProved) {
  const VerifyReport r = VerifyPlan(PlanOf(Stacking{}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent);
  EXPECT_TRUE(r.failures.empty()) << r.failures[0].message;
}

TEST(ConcatRegionTest, StagesOfUnequalSizesAreProved) {
  // Three rows on device 0, one on device 1: the sum of squares of rows [0, 3) of
  // four is a share of the whole's, though 3 does not divide 4.
  Stacking s;
  s.inputs[0] = {0, 1, 2};
  s.inputs[1] = {3};
  s.rows[1] = 3;
  s.share[0] = "[0,3/4)";
  s.share[1] = "[3/4,1)";
  const VerifyReport r = VerifyPlan(PlanOf(s));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent);
  EXPECT_TRUE(r.failures.empty()) << r.failures[0].message;
}

TEST(ConcatRegionTest, RowsConcatenatedOutOfOrderAreRefuted) {
  // Device 1 stacks x3 before x2: no region of the spec's stack.
  Stacking s;
  s.inputs[1] = {3, 2};
  const VerifyReport r = VerifyPlan(PlanOf(s));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  EXPECT_FALSE(r.failures.empty());
}

TEST(ConcatRegionTest, RowsClaimedWhereTheyAreNotAreRefuted) {
  // Device 1 stacks x2 and x3 but claims rows [0, 2) of the stack.
  Stacking s;
  s.rows[1] = 0;
  const VerifyReport r = VerifyPlan(PlanOf(s));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  EXPECT_FALSE(r.failures.empty());
}

}  // namespace
}  // namespace loom::verify
