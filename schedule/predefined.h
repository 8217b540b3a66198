#ifndef LOOM_SCHEDULE_PREDEFINED_H_
#define LOOM_SCHEDULE_PREDEFINED_H_

// Published pipeline schedules, as per-device orders over the stage models of
// placements.h: baselines for the searcher and valid inputs for the simulator.
//
// GPipe, 1F1B / PipeDream-flush, Megatron's interleaved 1F1B, ZB-H1, ZB-V and DualPipe
// follow the closed-form orders of their published implementations, ZB-H2 the paper's
// (ZB-H1 with twice the warm-up and the W lag); Chimera, published as a figure, comes
// from a greedy list scheduler with the rule the figure follows (see predefined.cc). Schedules only order blocks: timing is left to
// `Simulate` (as soon as possible with the given orders), so the schedules stay
// valid for any spans and transfer lags.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedule/block_model.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// Names MakePredefinedSchedule knows, sorted: "1f1b", "chimera", "dualpipe", "gpipe",
// "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v".
std::vector<std::string> PredefinedScheduleNames();

// The per-device orders of schedule `name` for `microbatches` micro-batches of
// `model`, which must be the stage model the schedule is defined on:
//  - "gpipe", "1f1b": MakeStageModel(p, p, "loop", ...);
//  - "interleaved_1f1b": MakeStageModel(p, p * v, "loop", ...), v >= 1 chunks per
//    device, microbatches % p == 0 (Megatron's rule);
//  - "zb_h1", "zb_h2": MakeStageModel(p, p, "loop", ...) with a split backward
//    (backward_weight > 0);
//  - "zb_v": MakeStageModel(p, 2 * p, "v", ...) with a split backward;
//  - "chimera": MakeBidirectionalStageModel(p, ...) with p even and an unsplit
//    backward; microbatches counts pairs (2 * microbatches real micro-batches);
//  - "dualpipe": MakeBidirectionalStageModel(p, ...) with p even, a split backward
//    and microbatches >= p pairs (DualPipe's num_chunks >= 2 * PP).
// The schedules that do not defer weight gradients (gpipe, 1f1b, interleaved_1f1b)
// also accept a split backward and run each W right after its I. A model or a
// micro-batch count the schedule is not defined for is an InvalidArgument error
// naming the schedule and what it needs. The result has `name` set to `name` and no
// explicit start times.
absl::StatusOr<Schedule> MakePredefinedSchedule(absl::string_view name, const BlockModel& model,
                                                int microbatches);

// A bidirectional stage model (Chimera, DualPipe): one micro-batch of the model is a
// pair of real micro-batches over two weight replicas, one flowing down (stage s on
// device s) and one flowing up (stage s on device devices - 1 - s). Blocks, in order:
// Fd<s> for s ascending, Bd<s> (or Id<s>, then Wd<s>, when costs.backward_weight > 0)
// for s descending, then the same for the up direction with Fu / Bu / Iu / Wu. Spans,
// memory and lags are those of MakeStageModel with the same costs; `stage` is s.
absl::StatusOr<BlockModel> MakeBidirectionalStageModel(int devices, const StageCosts& costs);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_PREDEFINED_H_
