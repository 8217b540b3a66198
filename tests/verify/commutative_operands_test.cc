// Operands in another order than the spec's. For an op whose schema says its
// operands commute (add, mul, accumulate) the piece computes the same, and the
// plan is proved; for any other op (sub) it is a swapped operand.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "ir/text_format.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ir::ValueId;

constexpr char kSpec[] = R"(
graph "operands" {
  %a = input f64[2,3]
  %b = input f64[2,3]
  %g = input f64[3]
  %y = %OP(%a, %SECOND) : f64[2,3] @forward
  output %y
}
)";

// One device runs the op reading `order` (indices into a, b or g, as named).
VerifyReport VerifyOrder(const std::string& op, const std::string& second,
                         const std::vector<int>& order) {
  std::string text = kSpec;
  text.replace(text.find("%OP"), 3, op);
  text.replace(text.find("%SECOND"), 7, second);
  auto spec = ir::ParseGraph(text, "operands.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return VerifyReport{};
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"tp", 1}});
  auto value = [&](ir::TensorId tensor) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan.values.size());
    v.sub = ir::SubTensor{tensor, ir::FullBox(spec->tensor(tensor).shape)};
    v.dtype = ir::DType::kF64;
    plan.values.push_back(std::move(v));
    return plan.values.back().id;
  };
  std::vector<ValueId> inputs;
  for (ir::TensorId t = 0; t < 3; ++t) inputs.push_back(value(t));
  const ir::Op& o = spec->op(0);
  ir::Task task;
  task.id = 0;
  task.op = 0;
  task.kind = o.kind;
  for (int k : order) task.inputs.push_back(inputs[o.inputs[k]]);
  task.outputs = {value(o.outputs[0])};
  plan.outputs = task.outputs;
  plan.tasks.push_back(std::move(task));
  EXPECT_TRUE(ir::ValidatePlan(*spec, plan).ok()) << ir::ValidatePlan(*spec, plan);
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

TEST(CommutativeOperandsTest, SchemasSayWhichOpsCommute) {
  EXPECT_TRUE(ir::GetOpSchema(ir::OpKind::kAdd).commutative);
  EXPECT_TRUE(ir::GetOpSchema(ir::OpKind::kMul).commutative);
  EXPECT_TRUE(ir::GetOpSchema(ir::OpKind::kAccumulate).commutative);
  EXPECT_FALSE(ir::GetOpSchema(ir::OpKind::kSub).commutative);
  EXPECT_FALSE(ir::GetOpSchema(ir::OpKind::kMatMul).commutative);
}

TEST(CommutativeOperandsTest, CommutingOperandsInAnotherOrderAreProved) {
  for (const char* op : {"add", "mul", "accumulate"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(VerifyOrder(op, "%b", {0, 1}).verdict, Verdict::kEquivalent);
    EXPECT_EQ(VerifyOrder(op, "%b", {1, 0}).verdict, Verdict::kEquivalent);
  }
  // A broadcast operand first.
  EXPECT_EQ(VerifyOrder("mul", "%g", {1, 0}).verdict, Verdict::kEquivalent);
}

TEST(CommutativeOperandsTest, OtherOpsWithOperandsSwappedAreRefuted) {
  const VerifyReport r = VerifyOrder("sub", "%b", {1, 0});
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_EQ(r.failures[0].cls, FailureClass::kSwappedOperands);
}

TEST(CommutativeOperandsTest, ASumReadingOneOperandTwiceIsStillRefuted) {
  const VerifyReport r = VerifyOrder("add", "%b", {0, 0});
  EXPECT_EQ(r.verdict, Verdict::kNotEquivalent);
}

}  // namespace
}  // namespace loom::verify
