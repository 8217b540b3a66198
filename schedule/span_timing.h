#ifndef LOOM_SCHEDULE_SPAN_TIMING_H_
#define LOOM_SCHEDULE_SPAN_TIMING_H_

// Timing a schedule for iterations that follow each other without a barrier. When
// the optimizer step needs no global synchronisation before the next iteration
// (Zero Bubble's post-validation), iteration k + 1 may start on a device as soon as
// that device has finished iteration k, so a steady run costs, per iteration, the
// longest device span: on one device, from its first block's start to its last
// block's end. With the device orders fixed, the least such span is the least S for
// which the start times admit every dependency and lag, every device's order, and
// last end - first start <= S on every device: difference constraints, whose
// feasibility for a given S is a longest-path computation (a positive cycle says
// infeasible), searched over S by bisection. The memory of each device depends on its
// order only, so it is the same at every timing.

#include "absl/status/statusor.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// `schedule` with explicit start times at which its longest device span is least
// for its device orders (the earliest such times). FailedPrecondition, with the
// simulator's violation, when the orders cannot be timed (incomplete, deadlocked);
// memory caps are not checked here (the orders decide them; Simulate tells).
absl::StatusOr<Schedule> TimeForLeastSpan(const BlockModel& model, const Schedule& schedule);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_SPAN_TIMING_H_
