#ifndef LOOM_VERIFY_FINDINGS_H_
#define LOOM_VERIFY_FINDINGS_H_

// What verification finds, as the derivation (verify/derive.h), the schedule checks
// (verify/schedule_safety.h) and the report (verify/report.h) share it: the
// classes of failure, a failure at its place, an undecided check, and a compute
// task's use of its op kind's partition law, which the law checks
// (verify/laws.h, law_reduce.h, law_resize.h) prove.

#include <cstdint>
#include <string>
#include <vector>

#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::verify {

// X(enumerator, name, plain words)
#define LOOM_FAILURE_CLASS_LIST(X)                                                   \
  X(kMissingReduction, "missing_reduction", "missing reduction")                    \
  X(kScaled, "scaled", "scaled by a constant factor")                               \
  X(kWrongShard, "wrong_shard", "wrong shard or wrong offset")                      \
  X(kWrongGroup, "wrong_group", "wrong group or peer")                              \
  X(kSwappedOperands, "swapped_operands", "swapped operands")                       \
  X(kMissingPiece, "missing_piece", "missing piece")                                \
  X(kDoubledPiece, "doubled_piece", "doubled piece")                                \
  X(kComputationDiffers, "computation_differs", "computation differs")              \
  X(kWrongClaim, "wrong_claim", "lineage claim contradicts the data flow")          \
  X(kDeadlock, "deadlock", "schedule can deadlock")                                 \
  X(kScheduleOrder, "schedule_order", "schedule order is unsafe")                   \
  X(kMemory, "memory", "memory above capacity")

enum class FailureClass {
#define LOOM_FAILURE_ENUM_(e, name, words) e,
  LOOM_FAILURE_CLASS_LIST(LOOM_FAILURE_ENUM_)
#undef LOOM_FAILURE_ENUM_
};
std::string FailureClassName(FailureClass c);   // "missing_reduction"
std::string FailureClassWords(FailureClass c);  // "missing reduction"

// One place where the plan does not compute what the spec computes.
struct Failure {
  FailureClass cls = FailureClass::kComputationDiffers;
  std::string item;       // "task 12 'linear'" / "collective 3 all_reduce"
  std::vector<int64_t> devices;
  int microbatch = -1;
  std::string tensor;     // logical tensor
  std::string box;        // "[0:2,0:8]"
  std::string part;       // the claimed value part
  std::string first_op;   // logical op where the values first diverge
  std::string message;    // one line
  // One line of concrete values showing the difference (every lineage failure
  // has one): "with every term of the sum over k (32 terms) equal to 1, it holds
  // 16 (chunk [0:16]) where the complete value is 32".
  std::string counterexample;
  int64_t position = 0;   // data-flow position, for ordering
};

// Something the derivation could not decide (never a proof either way).
struct Undecided {
  std::string item;
  std::string reason;
};

// A compute task's use of its op kind's partition law: the logical op's
// attributes and input types and, per signature label, the interval the piece
// covers and the label's extent.
struct LawUse {
  ir::OpKind kind = ir::OpKind::kAdd;
  ir::OpId op = ir::kNoId;          // first spec op seen with this law
  std::vector<ir::TensorType> inputs;
  ir::AttrMap attrs;
  std::vector<std::string> labels;  // sorted label names
  std::vector<ir::Interval> intervals;
  std::vector<int64_t> extents;
  std::vector<int> partial_inputs;  // the positions pieces are additive in (partial sums)
  std::string key;                  // canonical key (kind, attrs, types, pattern)
};

// The canonical key of a law (kind, attributes, input types, label pattern,
// partial operands): equal keys are the same law.
std::string LawKey(const LawUse& law);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_FINDINGS_H_
