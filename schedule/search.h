#ifndef LOOM_SCHEDULE_SEARCH_H_
#define LOOM_SCHEDULE_SEARCH_H_

// Repetend-based schedule search. The repetend is the steady state: every block of
// one micro-batch once, block b of micro-batch m starting at offset[b] + m * P for a
// period P. It is searched as a modulo schedule: offsets are placed block by block
// in dependency order on a reservation table of P columns per device (a block on
// several devices books the same columns on each), by a depth-first search pruned by
// column capacity and a memory lower bound, for P rising from
// the lower bound max_d(work of device d per micro-batch); the first repetend found at
// the least feasible period is kept (blocks are tried as early as they are ready, so
// it is also short). Warm-up and cool-down are
// not built apart: the N copies of the repetend are laid out together and the whole
// schedule is re-timed as soon as possible with the per-device orders, so the ramps
// are tightened jointly with the steady state. The search is deterministic.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

struct SearchOptions {
  int microbatches = 1;
  // Depth-first nodes the search may visit over all periods it tries; the search is
  // deterministic as long as this budget, not the time limit, ends it.
  int64_t node_limit = 2'000'000;
  // Wall-clock safety net in seconds; 0: none.
  double time_limit_seconds = 0;
};

struct SearchResult {
  Schedule schedule;              // N micro-batches, with its repetend
  SimResult sim;                  // simulated: makespan, bubble, peak memory
  int64_t period = 0;
  int64_t period_lower_bound = 0;  // max over devices of the work of one micro-batch
  bool period_optimal = false;     // period == period_lower_bound: optimal in the model
  // Why the period is above the bound, in words (empty when optimal).
  std::string gap_reason;
  int64_t makespan_lower_bound = 0;  // MakespanLowerBound for N micro-batches
  int in_flight = 0;                 // micro-batches one repetend spans
  int64_t latency = 0;               // one micro-batch's first start to last end
  int64_t nodes = 0;                 // search nodes visited
  double seconds = 0;                // search time, wall clock
};

// Searches a schedule for `options.microbatches` copies of the model's blocks
// within its memory caps. InvalidArgument for an invalid model (ValidateBlockModel)
// and ResourceExhausted when no schedule was found within the limits.
absl::StatusOr<SearchResult> SearchSchedule(const BlockModel& model,
                                            const SearchOptions& options);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_SEARCH_H_
