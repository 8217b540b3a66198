// Micro-batches of a data-parallel rank's rows. The spec splits the whole batch into
// four micro-batches and accumulates what each gives; each of two devices holds half
// of the batch, cuts it into its two micro-batches with local slices (each claiming
// the spec's micro-batch it is), accumulates them with zeros for the other device's
// two, and an all-reduce completes the sum. A slice holds the piece of the split's
// output it claims only where its positions lie within that output.

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
graph "microbatches" {
  %x = input f64[8,3]
  %m0, %m1, %m2, %m3 = split(%x) {dim=0, sizes=[2,2,2,2]} : f64[2,3], f64[2,3], f64[2,3], f64[2,3] @forward
  %g = accumulate(%m0, %m1, %m2, %m3) : f64[2,3] @backward
  output %g
}
)";

constexpr ir::TensorId kX = 0;
constexpr ir::TensorId kMicro0 = 1;  // %m0; %m1..%m3 follow
constexpr ir::TensorId kSum = 5;

struct Slicing {
  // Device d's slice k: its rows [begin, begin + 2) of the device's four rows, and
  // the spec micro-batch its value claims (all of it).
  int64_t begin[2][2] = {{0, 2}, {0, 2}};
  int claimed[2][2] = {{0, 1}, {2, 3}};
};

ir::Plan PlanOf(const Slicing& s) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"dp", 2}});
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
    const ValueId rows = value(d, kX, Box{{4 * d, 4 * d + 4}, {0, 3}}, "full");
    std::vector<ValueId> terms(4, ir::kNoId);
    for (int k = 0; k < 2; ++k) {
      const int m = s.claimed[d][k];
      const ValueId piece = value(d, kMicro0 + m, Box{{0, 2}, {0, 3}}, "full");
      ir::Task& slice = task(d, ir::kNoId, ir::OpKind::kSlice, {rows}, piece);
      slice.attrs.Set("dim", int64_t{0});
      slice.attrs.Set("begin", s.begin[d][k]);
      slice.attrs.Set("end", s.begin[d][k] + 2);
      terms[m] = piece;
    }
    for (int m = 0; m < 4; ++m) {
      if (terms[m] != ir::kNoId) continue;
      terms[m] = value(d, kMicro0 + m, Box{{0, 2}, {0, 3}}, "0");
      ir::Task& fill = task(d, ir::kNoId, ir::OpKind::kFill, {}, terms[m]);
      fill.attrs.Set("shape", std::vector<int64_t>{2, 3});
      fill.attrs.Set("value", 0.0);
      fill.attrs.Set("dtype", std::string("f64"));
    }
    const ValueId held = value(d, kSum, Box{{0, 2}, {0, 3}}, d == 0 ? "[0,1/2)" : "[1/2,1)");
    task(d, 1, ir::OpKind::kAccumulate, terms, held);
    sum.inputs.push_back(held);
  }
  for (int64_t d = 0; d < 2; ++d) {
    const ValueId out = value(d, kSum, Box{{0, 2}, {0, 3}}, "full");
    sum.outputs.push_back(out);
    plan.outputs.push_back(out);
  }
  plan.collectives.push_back(std::move(sum));
  return plan;
}

VerifyReport VerifyPlan(const ir::Plan& plan) {
  auto spec = ir::ParseGraph(kSpec, "microbatches.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ir::ValidatePlan(*spec, plan).ok()) << ir::ValidatePlan(*spec, plan);
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

TEST(SplitPieceTest, EachDevicesMicroBatchesAccumulatedThenSummedAreProved) {
  const VerifyReport r = VerifyPlan(PlanOf(Slicing{}));
  EXPECT_EQ(r.verdict, Verdict::kEquivalent);
  EXPECT_TRUE(r.failures.empty()) << r.failures[0].message;
}

TEST(SplitPieceTest, ASliceClaimingAnotherMicroBatchIsRefuted) {
  // Device 1's rows [4, 6) are micro-batch 2; claimed as micro-batch 3 (its terms
  // swapped), the sum still adds four terms, but not the spec's.
  Slicing s;
  s.claimed[1][0] = 3;
  s.claimed[1][1] = 2;
  const VerifyReport r = VerifyPlan(PlanOf(s));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_NE(r.failures[0].message.find("holds a piece of 'x'"), std::string::npos)
      << r.failures[0].message;
}

TEST(SplitPieceTest, ASliceAcrossTwoMicroBatchesIsRefuted) {
  // Rows [1, 3) of device 0 straddle micro-batches 0 and 1.
  Slicing s;
  s.begin[0][0] = 1;
  const VerifyReport r = VerifyPlan(PlanOf(s));
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
}

}  // namespace
}  // namespace loom::verify
