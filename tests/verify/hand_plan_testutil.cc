#include "tests/verify/hand_plan_testutil.h"

#include <utility>

#include "gtest/gtest.h"
#include "ir/text_format.h"

namespace loom::verify::testing {

ir::ValueId HandPlan::Value(int64_t device, ir::TensorId tensor, ir::Box box,
                            const std::string& part, ir::Rational scale) {
  ir::PlanValue v;
  v.id = static_cast<ir::ValueId>(plan.values.size());
  v.device = device;
  v.sub = ir::SubTensor{tensor, std::move(box)};
  v.sub.part = *ir::ValuePart::Parse(part);
  v.sub.scale = scale;
  v.dtype = ir::DType::kF64;
  plan.values.push_back(std::move(v));
  return plan.values.back().id;
}

void HandPlan::Task(int64_t device, ir::OpId op, ir::OpKind kind, std::vector<ir::ValueId> in,
                    std::vector<ir::ValueId> out, ir::AttrMap attrs) {
  ir::Task t;
  t.id = static_cast<int>(plan.tasks.size());
  t.op = op;
  t.kind = kind;
  t.attrs = std::move(attrs);
  t.device = device;
  t.inputs = std::move(in);
  t.outputs = std::move(out);
  plan.tasks.push_back(std::move(t));
}

VerifyReport VerifyHandPlan(const char* spec_text, const ir::Plan& plan) {
  auto spec = ir::ParseGraph(spec_text, "hand_plan.loom");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return VerifyReport{};
  const absl::Status valid = ir::ValidatePlan(*spec, plan);
  EXPECT_TRUE(valid.ok()) << valid;
  VerifyOptions options;
  options.threads = 1;
  auto report = Verify(*spec, plan, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : VerifyReport{};
}

std::string Failures(const VerifyReport& r) {
  std::string s;
  for (const Failure& f : r.failures) s += FailureClassName(f.cls) + ": " + f.message + "\n";
  for (const Undecided& u : r.undecided) s += "undecided: " + u.reason + "\n";
  return s;
}

}  // namespace loom::verify::testing
