#ifndef LOOM_SCHEDULE_PLAN_STEPS_H_
#define LOOM_SCHEDULE_PLAN_STEPS_H_

// Internal to plan_blocks.cc and plan_order.cc, not part of the schedule API: a
// plan's tasks and collectives as one list of steps with their data flow, and the
// block (see schedule/plan_blocks.h) each step belongs to.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "ir/plan.h"
#include "schedule/block_model.h"

namespace loom::schedule::internal {

// An InvalidArgument status whose message is `args` concatenated.
template <typename... Args>
absl::Status Error(Args&&... args) {
  return absl::InvalidArgumentError(absl::StrCat(std::forward<Args>(args)...));
}

// The tasks and collectives of a plan as one list of steps (task t is step t,
// collective c is step num_tasks + c) with the data flow between them.
class StepGraph {
 public:
  // The steps of `plan`, which must outlive the result. Errors: an unknown value,
  // a value written twice, a cycle in the data flow.
  static absl::StatusOr<StepGraph> Build(const ir::Plan& plan);

  // Number of steps: tasks then collectives.
  int num_steps() const { return static_cast<int>(position_.size()); }
  // Number of tasks; steps from here on are collectives.
  int num_tasks() const { return num_tasks_; }
  // Whether step `s` is a collective.
  bool is_collective(int s) const { return s >= num_tasks_; }
  // The task of step `s` (a task step).
  const ir::Task& task(int s) const { return plan_->tasks[s]; }
  // The collective of step `s` (a collective step).
  const ir::Collective& collective(int s) const { return plan_->collectives[s - num_tasks_]; }
  // The values step `s` reads.
  const std::vector<ir::ValueId>& inputs(int s) const {
    return is_collective(s) ? collective(s).inputs : task(s).inputs;
  }
  // The values step `s` writes.
  const std::vector<ir::ValueId>& outputs(int s) const {
    return is_collective(s) ? collective(s).outputs : task(s).outputs;
  }
  // The micro-batch of step `s`, negative when untagged.
  int microbatch(int s) const {
    return is_collective(s) ? collective(s).microbatch : task(s).info.microbatch;
  }
  // Forward and not recomputed.
  bool is_forward(int s) const {
    return is_collective(s) ? collective(s).phase == ir::Phase::kForward && !collective(s).recompute
                            : task(s).info.phase == ir::Phase::kForward && !task(s).recompute;
  }
  // The step writing value `v`, -1 for a plan input.
  int producer(ir::ValueId v) const { return producer_[v]; }
  // The steps reading value `v`, once per read.
  absl::Span<const int> consumers(ir::ValueId v) const {
    return absl::MakeConstSpan(consumers_)
        .subspan(consumer_begin_[v], consumer_begin_[v + 1] - consumer_begin_[v]);
  }
  // Every step once, each after the steps producing its inputs, close to plan order.
  const std::vector<int>& topo() const { return topo_; }
  // The index of step `s` in topo().
  int position(int s) const { return position_[s]; }
  // Step `s` as an entry of Plan::order.
  ir::PlanStep plan_step(int s) const {
    return is_collective(s) ? ir::PlanStep{true, s - num_tasks_} : ir::PlanStep{false, s};
  }
  // Step `s` for error messages: kind, id, devices and micro-batch.
  std::string Describe(int s) const;

 private:
  absl::Status TopologicalOrder();

  const ir::Plan* plan_ = nullptr;
  int num_tasks_ = 0;
  std::vector<int> producer_;        // per value: step, -1 for plan inputs
  std::vector<int> consumer_begin_;  // per value + 1: offsets into consumers_
  std::vector<int> consumers_;       // steps reading each value, with multiplicity
  std::vector<int> topo_;
  std::vector<int> position_;  // per step: index in topo_
};

// Which block each step belongs to.
struct Assignment {
  std::vector<int> step_block;        // per step: block id or kBeforeBlocks, ...
  std::vector<Block> blocks;          // names, kinds, stages and devices only
  std::vector<int> rank_of_device;    // per mesh device: its pipeline rank
  std::vector<int> forward_of_stage;  // per stage: its F block, -1 when none
  int num_ranks = 1;
};

// The pipeline ranks and blocks of `plan`'s steps `g`, by the rules of
// schedule/plan_blocks.h. Errors name the step: a device outside the mesh, a stage
// on several ranks, a block step reading a value of a later block that blocks read.
absl::StatusOr<Assignment> AssignBlocks(const ir::Plan& plan, const StepGraph& g);

// The number of micro-batches of `plan` (its factoring's, else one more than the
// largest tag of steps `g`), at least 1.
int PlanMicrobatches(const ir::Plan& plan, const StepGraph& g);

}  // namespace loom::schedule::internal

#endif  // LOOM_SCHEDULE_PLAN_STEPS_H_
