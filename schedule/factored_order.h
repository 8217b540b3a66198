#ifndef LOOM_SCHEDULE_FACTORED_ORDER_H_
#define LOOM_SCHEDULE_FACTORED_ORDER_H_

// Internal to plan_order.cc: the order of a factored plan written block by block,
// without expanding the plan over its micro-batches or replicas.

#include "absl/status/statusor.h"
#include "ir/plan.h"
#include "schedule/block_model.h"
#include "schedule/plan_steps.h"
#include "schedule/schedule.h"

namespace loom::schedule::internal {

// The factored order of `plan` (factored; `g` its steps, `a` their blocks) running
// `schedule` on `model` with simulated starts `sim`. Each unit device runs its
// work before the blocks, then, in one global sequence ordered by simulated start,
// every block instance of its pipeline rank (the device's steps of the block, in
// data-flow order, as one run of the instance's micro-batch copy), each transfer
// between ranks right after the instance producing its value (or, when no block
// produces it, right before the instance reading it), then the tagged work after
// the blocks copy by copy and the untagged work after them. Every step shared by
// several devices sits at one point of that global sequence in each of their
// programs, so they issue shared collectives in one relative order, and the global
// sequence itself runs every program to its end. Errors: a block step reaching a
// device outside the block's rank, a transfer outside every block.
absl::StatusOr<ir::FactoredOrder> FactoredPlanOrder(const ir::Plan& plan, const StepGraph& g,
                                                    const Assignment& a,
                                                    const BlockModel& model,
                                                    const Schedule& schedule,
                                                    const SimResult& sim);

}  // namespace loom::schedule::internal

#endif  // LOOM_SCHEDULE_FACTORED_ORDER_H_
