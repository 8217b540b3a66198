#ifndef LOOM_SCHEDULE_REPETEND_SEARCH_H_
#define LOOM_SCHEDULE_REPETEND_SEARCH_H_

// The repetend search of search.h: the steady state of one micro-batch's blocks at
// the least period the caps allow, placed as a modulo schedule on a reservation
// table of P columns per device by a depth-first search pruned by column capacity
// and a memory lower bound, periods Z3 decides where the search leaves them open
// (models without caps), and the schedule of N micro-batches its offsets give,
// re-timed as soon as possible with its device orders. SearchSchedule compares it
// with the other schedules; this is the search alone.

#include <chrono>

#include "absl/status/statusor.h"
#include "schedule/block_model.h"
#include "schedule/search.h"

namespace loom::schedule {

// The deadline `seconds` after `started` (none when seconds is 0).
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point started,
                                                    double seconds);

// The repetend search from `started` within `options`' node and time limits: the
// searched schedule (named "search", with its repetend) and the period's bounds and
// explanation, or ResourceExhausted when none was found within the limits.
// `facts` must be AnalyzeBlockModel(model).
absl::StatusOr<SearchResult> SearchRepetend(const BlockModel& model, const ModelFacts& facts,
                                            const SearchOptions& options,
                                            std::chrono::steady_clock::time_point started);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_REPETEND_SEARCH_H_
