#ifndef LOOM_SMT_SCHEDULE_OPTIMUM_H_
#define LOOM_SMT_SCHEDULE_OPTIMUM_H_

// The least makespan of a small scheduling problem, found by Z3's optimizer. It
// measures the schedule search against the optimum in tests and benchmarks; the
// search never calls it (it scales to a few hundred jobs, not to real plans).
//
// The problem is the simulator's (schedule/schedule.h) with its jobs spelled out:
// each job occupies its devices for its span without preemption, starts after each
// predecessor's end plus the lag, and changes the memory of each of its devices by
// its delta when it starts; the running memory of a device must stay within its cap.

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::smt {

struct ScheduleJob {
  int64_t span = 1;
  int64_t memory = 0;
  std::vector<int> devices;
  std::vector<std::pair<int, int64_t>> preds;  // (job, lag)
};

struct ScheduleProblem {
  int num_devices = 0;
  std::vector<int64_t> caps;  // per device; empty: none
  std::vector<ScheduleJob> jobs;
  // Pairs (a, b): a schedule with a starting no later than b exists whenever one
  // exists at all (identical micro-batches, say); the solver adds them to cut
  // symmetric search.
  std::vector<std::pair<int, int>> symmetric_order;
  // When positive, only schedules shorter than this are sought: "no schedule" then
  // proves that none is shorter (a schedule of this makespan being known).
  int64_t makespan_below = 0;
};

struct ScheduleOptimum {
  bool feasible = false;   // a valid schedule was found
  bool proved = false;     // makespan is the optimum (or infeasibility is proved)
  int64_t makespan = 0;    // the best found when feasible
  std::vector<int64_t> start;
};

// Minimises the makespan within `timeout_ms` (0: no limit). Without a proof the
// result is the best schedule found (proved false), or neither feasible nor proved
// when none was found in time.
absl::StatusOr<ScheduleOptimum> MinimumMakespan(const ScheduleProblem& problem,
                                                unsigned timeout_ms);

}  // namespace loom::smt

#endif  // LOOM_SMT_SCHEDULE_OPTIMUM_H_
