#ifndef LOOM_SCHEDULE_PLAN_BLOCKS_H_
#define LOOM_SCHEDULE_PLAN_BLOCKS_H_

// The scheduler's block model derived from a distributed plan, and the schedule
// found on it written back into the plan as per-device programs.
//
// Blocks. One block per pipeline stage (Task::stage, the virtual stage index) and
// phase: F<s> holds the stage's forward pieces of one micro-batch, B<s> its backward
// pieces and the forward pieces recomputed before them. Blocks are numbered
// F0..F<S-1>, then B<S-1>..B0 (as MakeStageModel numbers them); a stage without
// backward pieces (a forward-only graph) has no B block.
//
// Devices. A block-model device is one pipeline rank: the plan devices whose mesh
// coordinate along "pp" is that rank (every device when the mesh has no pp axis).
// The tensor- and data-parallel devices of a rank run the same blocks in lockstep;
// a block's span and memory are the largest over them (in a factored plan, over
// the scale unit, which stands for every data-parallel replica).
//
// Which block a task or collective belongs to. Items tagged with a micro-batch:
//  - tasks with a stage take it; tasks without one (the slices and zero fills the
//    transform inserts) and collectives take the stage of the items producing their
//    inputs on their devices, else of the items reading their outputs;
//  - phase forward and not recomputed: F; backward (or optimizer), and recomputed
//    forward pieces: B;
//  - an item without a stage of its own that prepares a value for a send to another
//    rank runs in the block producing that value, whatever its phase (a recomputed
//    consumer's clone of the slice before the send, for instance);
//  - a send_recv between two pipeline ranks belongs to no block: it is the transfer
//    on a dependency between two blocks (kBetweenRanks);
//  - an item that reads a value of a block running later in the pipeline order
//    (numbered after its own) and that only work after the blocks reads (the sum of
//    a tied embedding's two gradient contributions on the last stage) runs after
//    the blocks (kAfterBlocks); if blocks read it, BlocksFromPlan fails.
// Items without a micro-batch run outside the blocks: before every block when a
// tagged item depends on them (parameter conversions, kBeforeBlocks), else after
// every block (gradient accumulation, gradient all-reduce, norm, optimizer,
// kAfterBlocks).
//
// Costs (from micro-batch 0, see CostModel): a block's time on a device is the
// FLOPs of its tasks there (the op schema's count) / flops_per_second plus, for each
// of its collectives that the device takes part in, the bytes it moves per device
// (ring volumes: all_reduce 2(g-1)/g of the buffer, all_gather, reduce_scatter and
// all_to_all (g-1)/g of the full buffer, broadcast and send_recv the buffer) /
// bytes_per_second + latency_seconds.
//
// Dependencies are the plan's data flow between blocks (through collectives); their
// lag is the time of the send_recv on the way (0 for data staying on the rank). A
// dependency between ranks that a chain of others already enforces (B<s> reading
// the activation F<s-1> sent, which F<s> received first) is dropped; B<s> always
// follows F<s>.
//
// Memory: a forward block's memory is the bytes of the values it holds on a device
// (produced there, or received there from a forward block for this stage) that its
// stage's backward block reads, at most over the rank's devices; the backward block
// frees the same amount. Values a backward block keeps for the work after the
// blocks (per-micro-batch weight gradients) are not counted.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// Device and link speeds. The defaults describe an H100-class device: about 40% of
// the H100 SXM's 989 TFLOP/s dense bf16 peak, one 400 Gb/s (50 GB/s) network link per
// device, 10 us per collective.
struct CostModel {
  double flops_per_second = 4.0e14;  // dense matmul throughput per device
  double bytes_per_second = 5.0e10;  // link bandwidth for collectives and send_recv
  double latency_seconds = 1.0e-5;   // per collective (and per send_recv)
  // Seconds per time unit of the block model; 0: chosen so that the longest block
  // spans 100 units. Spans are rounded to the nearest unit, at least 1; lags to
  // the nearest unit, at least 0.
  double seconds_per_unit = 0;
  int64_t bytes_per_memory_unit = int64_t{1} << 20;  // memory in MiB (rounded up)
};

// Where a task or collective runs when it belongs to no block.
inline constexpr int kBeforeBlocks = -1;  // untagged, a tagged item depends on it
inline constexpr int kAfterBlocks = -2;   // untagged, after every block
inline constexpr int kBetweenRanks = -3;  // a tagged send_recv between pipeline ranks

// What one block costs, from micro-batch 0 on its busiest device.
struct BlockCost {
  double flops = 0;         // of its tasks on that device
  double comm_bytes = 0;    // moved by its collectives, per device
  int collectives = 0;      // its collectives on that device
  double seconds = 0;       // flops and collective time
  int64_t saved_bytes = 0;  // forward blocks: activations kept for the backward
};

struct PlanBlocks {
  BlockModel model;
  double seconds_per_unit = 0;  // the time unit used for spans and lags
  int64_t bytes_per_memory_unit = 0;  // the memory unit (CostModel's)
  int microbatches = 1;
  std::vector<BlockCost> costs;  // per block
  // Per task / collective of the plan given to BlocksFromPlan: its block id (the
  // block of the item's micro-batch), or kBeforeBlocks / kAfterBlocks /
  // kBetweenRanks.
  std::vector<int> task_block;
  std::vector<int> collective_block;
};

// The block model of `plan` (explicit or factored) under `cost`. Errors: a plan
// that is not a plan of `spec` (ir::ValidatePlan), a cost model that is not
// positive, a plan whose data flow has a cycle, a stage whose
// pieces lie on several pipeline ranks, a block model that fails
// ValidateBlockModel.
absl::StatusOr<PlanBlocks> BlocksFromPlan(const ir::Graph& spec, const ir::Plan& plan,
                                          const CostModel& cost = {});

// ApplySchedule orders a factored plan whose scale unit runs at most this many
// steps (task copies, and collective copies per member) over its micro-batches.
inline constexpr int64_t kMaxExpandedSteps = 1'000'000'000;

// `plan` with `order` filled from `schedule` (a valid schedule of `blocks.model`
// over the plan's micro-batches): each device runs the tasks before the blocks in
// plan order, then, for each block instance (block, micro-batch) of its pipeline
// rank in schedule order, that instance's tasks on the device in data-flow order,
// then the tasks after the blocks in plan order. Collectives are placed where a
// sequential run of all devices, advancing the block instances in the order of
// their simulated start times, has their inputs ready: every member lists them at
// the same point of that run, so their relative order agrees on all members and
// the programs cannot deadlock. A factored plan stays factored and is ordered
// block by block without being expanded (schedule/factored_order.h): its
// factored_order holds one program per scale-unit device, at most
// `max_expanded_steps` steps in all, which every data-parallel replica runs. `blocks` is
// BlocksFromPlan of the same plan, which checked it against its step. Errors name the
// place: a schedule that is invalid or made for other blocks, or one that contradicts
// the plan's data flow.
absl::StatusOr<ir::Plan> ApplySchedule(const ir::Plan& plan,
                                       const PlanBlocks& blocks, const Schedule& schedule,
                                       int64_t max_expanded_steps = kMaxExpandedSteps);

// The schedule `plan.order` runs on `blocks` (BlocksFromPlan of the same plan):
// per pipeline rank, its block instances in the order their first task appears in
// the program of each of the rank's devices (of the scale unit, for a factored
// plan). Errors: a plan without an order, a rank whose devices run the blocks in
// different orders (the block timing needs them in step), or one that misses an
// instance.
absl::StatusOr<Schedule> ScheduleFromPlanOrder(const ir::Plan& plan, const PlanBlocks& blocks);

// Checks that `plan.order` is a runnable per-device program: every task once in
// its device's list, every collective once in each member's list, and a run where
// each device follows its list, a step waits for its inputs and a collective for
// all its members, finishes (so each input is produced before it is used and
// collectives are issued in the same relative order by all members). The error
// names the devices and the steps they wait at.
absl::Status CheckPlanOrder(const ir::Plan& plan);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_PLAN_BLOCKS_H_
