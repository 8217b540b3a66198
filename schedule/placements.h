#ifndef LOOM_SCHEDULE_PLACEMENTS_H_
#define LOOM_SCHEDULE_PLACEMENTS_H_

// Preset block models: Tessel's operator placements for any device count (in
// training and inference form) and Zero Bubble's pipeline stage model.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedule/block_model.h"

namespace loom::schedule {

// Names of the placements MakePlacement knows, sorted.
std::vector<std::string> PlacementNames();

// One micro-batch of a Tessel placement over `devices` devices (forward span 1,
// backward span 3, +1 / -1 memory per pipeline block, 0 for blocks on every
// device; see docs/scheduling.md for each shape). Blocks are numbered in chain
// order (by earliest start, then lowest device), as Tessel numbers them.
// `inference`: the forward blocks only, memory 0. No memory cap is set.
absl::StatusOr<BlockModel> MakePlacement(absl::string_view name, int devices,
                                         bool inference = false);

// Zero Bubble's per-stage cost model: forward (F), backward for the input gradient
// (B, written I), backward for the weights (W), the transfer time between adjacent
// stages and the activation memory of one micro-batch, part of which the input
// backward frees and the rest the weight backward.
struct StageCosts {
  int64_t forward = 1;
  int64_t backward_input = 1;
  int64_t backward_weight = 1;   // 0: the backward is not split (one B block)
  int64_t comm = 0;              // lag between dependent blocks on adjacent stages
  int64_t activation = 2;        // memory a forward keeps (charged at its start)
  int64_t weight_memory = 1;     // of which the weight backward frees this much
};

// Pipeline stage models. `stages` stages on `devices` devices:
//  - "loop": stage s on device s % devices (1F1B, interleaved with stages/devices chunks);
//  - "v": 2 * devices stages, stage s on device s for s < devices, else 2 * devices - 1 - s
//    (ZB-V, the second chunk running back up the devices).
// Blocks: F<s> for each stage, then B<s> (or I<s> and W<s> when split) in reverse.
absl::StatusOr<BlockModel> MakeStageModel(int devices, int stages, absl::string_view layout,
                                          const StageCosts& costs);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_PLACEMENTS_H_
