#ifndef LOOM_VERIFY_FACTORED_SCHEDULE_SAFETY_INTERNAL_H_
#define LOOM_VERIFY_FACTORED_SCHEDULE_SAFETY_INTERNAL_H_

// Internal to verify/schedule_safety.cc: the schedule-safety checks of a factored
// plan's order (verify/schedule_safety.h), run on the scale unit's programs over
// every micro-batch copy without expanding the plan. Memory: per micro-batch copy
// of each collective a counter, per device its own value copies; time: linear in
// the programs' steps (copies counted) and their reads.
//
// The checks are the explicit plan's, with one difference in what is reported: a
// pair of devices issuing shared collectives in different orders shows as the
// deadlock it causes (a run that finishes issues them in one order), not as a
// separate collective_order issue. The deadlock run is made only when membership
// and local data flow are clean, as with explicit plans.

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/schedule_safety.h"

namespace loom::verify {

// The report of a factored plan with a factored order (unchecked otherwise).
// Malformed orders (unknown segments or ids, a copy outside the micro-batches, a
// tagged item run without a copy) are an InvalidArgument naming the place.
absl::StatusOr<SafetyReport> CheckFactoredScheduleSafety(const ir::Graph& spec,
                                                         const ir::Plan& plan,
                                                         const SafetyOptions& options);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_FACTORED_SCHEDULE_SAFETY_INTERNAL_H_
