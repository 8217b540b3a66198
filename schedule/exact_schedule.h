#ifndef LOOM_SCHEDULE_EXACT_SCHEDULE_H_
#define LOOM_SCHEDULE_EXACT_SCHEDULE_H_

// Branch and bound over every schedule of a small problem (a few hundred block
// instances): the shortest schedule of N micro-batches within the caps, or a proof
// that none is shorter than a given one, or that none exists.
//
// Why it covers every schedule. A device's running memory changes only when its
// blocks start, so whether a schedule keeps the caps depends on the per-device
// orders alone; timing those orders as soon as possible (what the simulator does)
// never ends later. The search therefore enumerates these as-soon-as-possible
// schedules, each exactly once: instances are appended in the order of their start
// times (ties by instance id; instances starting together share no device and do not
// depend on each other), each starting at the latest of its predecessors' ends plus
// lags and its devices' last ends. Micro-batches are interchangeable, so the copies
// of each block are taken in micro-batch order: in any schedule, giving the k-th
// earliest copy of every block to micro-batch k keeps every dependency (if x_m <= y_m
// for every m, the k-th least x is at most the k-th least y) and changes nothing a
// device runs or holds. A branch is cut when a lower bound (the longest remaining
// path; per device, its remaining instances released at their earliest starts and
// followed by their tails, run with preemption by Jackson's rule) reaches the best
// makespan known.

#include <chrono>
#include <cstdint>
#include <optional>

#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

struct ExactScheduleResult {
  // The best schedule found that is shorter than the bound given (nullopt: none).
  std::optional<Schedule> schedule;
  int64_t makespan = 0;  // of `schedule`
  // The search covered every schedule: nothing is shorter than `schedule`, or than
  // the bound given when none was found; with no bound and no schedule, none exists.
  bool exhaustive = false;
  int64_t nodes = 0;
};

// Searches schedules of `microbatches` copies of `model` within its caps with a
// makespan below `below` (the best one known; INT64_MAX for none), visiting at most
// `node_limit` nodes before `deadline`. `facts` must be AnalyzeBlockModel(model).
// The schedule returned is named "exact".
ExactScheduleResult BranchAndBoundSchedule(const BlockModel& model, const ModelFacts& facts,
                                           int microbatches, int64_t below, int64_t node_limit,
                                           std::chrono::steady_clock::time_point deadline);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_EXACT_SCHEDULE_H_
