#ifndef LOOM_SCHEDULE_INFLIGHT_SEARCH_H_
#define LOOM_SCHEDULE_INFLIGHT_SEARCH_H_

// A search over how many micro-batches each device keeps in flight. The schedules
// are built by one rule, run as an event simulation: a device that is free takes,
// among the block instances ready on it, a backward (B or I) first, then a forward
// while fewer forwards than its limit wait for their backward and the forward keeps
// it within its cap, then a weight gradient (W), which so fills the time a device
// would otherwise wait and frees memory when the cap stops a forward; the oldest
// micro-batch first in each class. Deferring W this way is what the Zero Bubble
// schedules do by hand; here the limits that make the device orders best for the
// objective are searched: first over the family limit(d) = round(a * r(d) + c),
// r(d) being how many of its forwards fit between a device's first forward of a
// micro-batch and that micro-batch's first backward on it (from the model's
// critical paths: 1F1B is about a = 1/2, ZB-H2 a = 1), then device by device, one
// step up or down while the objective improves. Every schedule is timed and checked
// by the simulator (for kSpan after TimeForLeastSpan). Models whose blocks each
// occupy one device only (pipeline stage models, any layout).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// The rule's schedule of `microbatches` micro-batches with limits[d] forwards in
// flight on device d (limits.size() == num_devices, each >= 1); nullopt on a dead
// end (the caps stop every device) or for a model with a block on several devices.
std::optional<Schedule> InFlightSchedule(const BlockModel& model, const ModelFacts& facts,
                                         int microbatches, const std::vector<int>& limits);

struct InFlightSearchResult {
  Schedule schedule;  // named "inflight"; explicit start times for kSpan
  SimResult sim;
  std::vector<int> limits;
  int evaluations = 0;  // schedules built and timed
};

// The best schedule the rule gives for `objective` over the limits searched, within
// `max_evaluations` schedules and the time before `deadline` (at least the family's
// first member is always tried); nullopt when none is valid.
std::optional<InFlightSearchResult> SearchInFlightLimits(const BlockModel& model,
                                                         const ModelFacts& facts,
                                                         int microbatches, Objective objective,
                                                         int max_evaluations,
                                                         std::chrono::steady_clock::time_point deadline);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_INFLIGHT_SEARCH_H_
