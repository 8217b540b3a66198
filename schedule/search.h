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
//
// The searched schedule then competes with every published schedule defined on the
// model (predefined.h: GPipe, 1F1B, interleaved 1F1B, ZB-H1/H2/V, Chimera, DualPipe),
// with greedy list schedules (list_schedule.h) and with the in-flight search
// (inflight_search.h: how many micro-batches each device keeps in flight, weight
// gradients deferred into its idle time), all timed by the simulator within the
// same caps: the best valid one by the objective is returned, so the result is never
// worse than a hand-made schedule the model admits. Small problems (up to 256 block
// instances) also get a local search over the best one's device orders
// (order_search.h) and a branch and bound over every schedule (exact_schedule.h),
// which may prove the makespan optimal, or that no schedule exists.

#include <cstdint>
#include <string>
#include <vector>

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
  // Compare with the predefined schedules defined on the model, the list
  // schedules and the in-flight search, and keep the best valid schedule by the
  // objective (ties go to the searched repetend).
  bool compare_alternatives = true;
  // What "best" means (schedule.h): one iteration's makespan, or the longest device
  // span when iterations follow each other without a barrier; with kSpan every
  // schedule compared is first timed for its least span (span_timing.h).
  Objective objective = Objective::kMakespan;
};

// A schedule compared on the model: the searched repetend ("search"), a predefined
// schedule or a list schedule ("list/<rule>").
struct ScheduleCandidate {
  std::string name;
  bool defined = false;  // the schedule is defined on the model (predefined.h; the
                         // others always are)
  bool fits = false;     // defined, and valid within the model's caps
  std::string why_not;   // when it does not fit
  int64_t makespan = 0;  // when it fits
  int64_t span = 0;      // when it fits: the longest device span (for kSpan, least)
  std::vector<int64_t> peak_memory;
};

struct SearchResult {
  // The schedule returned: the searched one (N micro-batches, with its repetend)
  // unless a predefined schedule is shorter; `schedule.name` says which.
  Schedule schedule;
  SimResult sim;                  // of `schedule`: makespan, bubble, peak memory
  // The searched repetend, whichever schedule was returned (0 when none was found
  // and a predefined schedule is returned instead).
  int64_t period = 0;
  int64_t period_lower_bound = 0;  // max over devices of the work of one micro-batch
  // No repetend has a shorter period: the period equals its lower bound, or every
  // shorter period was proved to have none (Z3, on models without memory caps).
  bool period_optimal = false;
  // Why the period is above the bound, in words (empty when it equals the bound);
  // when period_optimal, the proof.
  std::string gap_reason;
  int64_t makespan_lower_bound = 0;  // MakespanLowerBound for N micro-batches
  // The returned makespan equals its lower bound: proved optimal among all
  // schedules, not only repetends. False says only that no proof was made.
  bool makespan_optimal = false;
  // How it was proved, in words (empty when not): it meets the lower bound, or a
  // branch and bound over every schedule of the micro-batches found none shorter
  // (made only for kMakespan).
  std::string makespan_proof;
  Objective objective = Objective::kMakespan;
  // No device's span can be below its work: the most work of all N micro-batches
  // on one device. The returned span equals it: proved least (span_optimal).
  int64_t span_lower_bound = 0;
  bool span_optimal = false;
  // Every schedule compared: "search" first (fits is false when no repetend was
  // found), then the predefined ones by name, then the list schedules.
  std::vector<ScheduleCandidate> candidates;
  int in_flight = 0;                 // micro-batches one repetend spans
  int64_t latency = 0;               // one micro-batch's first start to last end
  int64_t nodes = 0;                 // search nodes visited
  double seconds = 0;                // search time, wall clock
};

// Searches a schedule for `options.microbatches` copies of the model's blocks
// within its memory caps. InvalidArgument for an invalid model (ValidateBlockModel)
// or when no schedule can exist (proved: the memory every micro-batch keeps exceeds
// a cap), and ResourceExhausted when none was found within the search's limits (a
// limit of the search, not a proof that none exists).
absl::StatusOr<SearchResult> SearchSchedule(const BlockModel& model,
                                            const SearchOptions& options);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_SEARCH_H_
