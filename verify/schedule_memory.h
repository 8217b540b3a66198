#ifndef LOOM_VERIFY_SCHEDULE_MEMORY_H_
#define LOOM_VERIFY_SCHEDULE_MEMORY_H_

// Internal to the schedule-safety checkers (verify/schedule_safety.cc and
// verify/factored_schedule_safety.cc): the memory rules both count by, written once.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::verify::internal {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

inline int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > kInt64Max / b) return kInt64Max;
  return a * b;
}

inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kInt64Max - b ? kInt64Max : a + b;
}

// Bytes of a value: its box's element count times its dtype's size.
inline int64_t ValueBytes(const ir::PlanValue& v) {
  int64_t elements = 1;
  for (const ir::Interval& iv : v.sub.box) {
    elements = SaturatingMul(elements, std::max<int64_t>(iv.size(), 0));
  }
  return SaturatingMul(elements, ir::DTypeBytes(v.dtype));
}

// The MemoryByRole field a value counts in (0 weights, 1 gradients, 2 optimizer
// states, 3 activations, 4 communication), from its tensor's role in `spec` (an
// activation without a spec) and whether a collective wrote it.
inline int MemoryRoleBucket(const ir::Graph* spec, const ir::PlanValue& value,
                            bool written_by_collective) {
  const ir::TensorId t = value.sub.tensor;
  const ir::TensorRole role = spec != nullptr && t >= 0 && t < spec->num_tensors()
                                  ? spec->tensor(t).role
                                  : ir::TensorRole::kActivation;
  if (role == ir::TensorRole::kParameter) return 0;
  if (role == ir::TensorRole::kOptimizerState) return 2;
  if (role == ir::TensorRole::kGradient && value.microbatch < 0) return 1;
  if (written_by_collective) return 4;
  return 3;
}

// Whether `input` (written by some step: `produced`) is folded into the running
// sum `task` as it arrives: an accumulate outside the micro-batches summing a
// micro-batch's value on its own device.
inline bool FoldsIntoRunningSum(const ir::Task& task, const ir::PlanValue& input, bool produced) {
  return task.kind == ir::OpKind::kAccumulate && task.info.microbatch < 0 &&
         task.outputs.size() == 1 && input.microbatch >= 0 && input.device == task.device &&
         produced;
}

}  // namespace loom::verify::internal

#endif  // LOOM_VERIFY_SCHEDULE_MEMORY_H_
