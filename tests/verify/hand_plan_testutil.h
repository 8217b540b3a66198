#ifndef LOOM_TESTS_VERIFY_HAND_PLAN_TESTUTIL_H_
#define LOOM_TESTS_VERIFY_HAND_PLAN_TESTUTIL_H_

// Plans written by hand against a spec in the text format, value by value and task
// by task, and the verifier's report on them: for tests of one derivation rule at a
// time (scaled values, pieces of a mean, ...).

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/verify.h"

namespace loom::verify::testing {

class HandPlan {
 public:
  explicit HandPlan(ir::Mesh mesh) { plan.mesh = std::move(mesh); }
  // A value on `device` claiming region `box` of `tensor`, share `part` ("full",
  // "[0,1/2)") at `scale` times it.
  ir::ValueId Value(int64_t device, ir::TensorId tensor, ir::Box box, const std::string& part,
                    ir::Rational scale = ir::Rational::One());
  // A task of spec op `op` (ir::kNoId: a local one) on `device`.
  void Task(int64_t device, ir::OpId op, ir::OpKind kind, std::vector<ir::ValueId> in,
            std::vector<ir::ValueId> out, ir::AttrMap attrs = {});

  ir::Plan plan;
};

// The plan, checked valid against `spec_text`, verified on one thread.
VerifyReport VerifyHandPlan(const char* spec_text, const ir::Plan& plan);
// Every failure and undecided item of a report, one per line ("scaled: ...").
std::string Failures(const VerifyReport& report);

}  // namespace loom::verify::testing

#endif  // LOOM_TESTS_VERIFY_HAND_PLAN_TESTUTIL_H_
