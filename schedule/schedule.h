#ifndef LOOM_SCHEDULE_SCHEDULE_H_
#define LOOM_SCHEDULE_SCHEDULE_H_

// A schedule: for every device, the order in which it runs its block instances
// (block, micro-batch) across N micro-batches; optionally explicit start times.
// The simulator times a schedule (as soon as possible with the given per-device
// orders, or at its explicit times), checks every rule, and measures it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedule/block_model.h"

namespace loom::schedule {

struct Instance {
  int block = 0;
  int microbatch = 0;
  bool operator==(const Instance& o) const {
    return block == o.block && microbatch == o.microbatch;
  }
};

// The repeating steady state a searched schedule was built from: block b of
// micro-batch m starts at offset[b] + m * period before re-timing.
struct Repetend {
  int64_t period = 0;
  std::vector<int64_t> offset;  // per block
};

struct Schedule {
  int microbatches = 0;
  // Per device, the instances it runs in order. A block on several devices appears
  // in the order of each of them.
  std::vector<std::vector<Instance>> order;
  // Optional explicit start times, indexed by microbatch * num_blocks + block.
  // Absent: instances start as soon as their dependencies and devices allow.
  std::vector<int64_t> start;
  std::optional<Repetend> repetend;
  std::string name;  // what made it: "1f1b", "search", ...
};

// Outcome of simulating a schedule. `valid` is false with the first rule broken in
// `violation`; metrics are filled only for valid schedules (and when the timing
// itself could be computed).
struct SimResult {
  bool valid = false;
  std::string violation;
  std::vector<int64_t> start;       // per instance (microbatch * num_blocks + block)
  int64_t makespan = 0;             // last end - first start
  // The longest device span: max over devices of its last end - its first start,
  // what an iteration costs when iterations follow each other without a barrier
  // (span_timing.h).
  int64_t span = 0;
  std::vector<int64_t> busy;        // per device: time spent running blocks
  std::vector<double> bubble;       // per device: idle share of the makespan
  double bubble_ratio = 0;          // idle share over all devices
  double span_bubble_ratio = 0;     // idle share over all devices of `span` each
  std::vector<int64_t> peak_memory; // per device, from level 0
};

// What a schedule is measured by. kMakespan: one iteration alone, from its first
// block's start to its last block's end. kSpan: iterations following each other
// without a barrier (the optimizer's step validated afterwards, as Zero Bubble
// does), where an iteration costs the longest device span (SimResult::span), each
// schedule timed for its least span (span_timing.h).
enum class Objective { kMakespan, kSpan };
// "makespan", "span".
std::string ObjectiveName(Objective objective);
absl::StatusOr<Objective> ParseObjective(absl::string_view name);
// The figure `objective` measures in `sim`.
int64_t ObjectiveValue(Objective objective, const SimResult& sim);

// Times and checks a schedule. Rules, checked in this order, the first broken one
// named in `violation`: every instance of every micro-batch on each of its devices
// exactly once and on no other device; the orders can run without deadlock (a cycle
// names the devices and the blocks waiting); explicit times, when given, keep the
// per-device order, never overlap on a device and respect every dependency and lag;
// the running memory sum of each device stays within its cap. A malformed schedule
// (wrong device count, unknown block, micro-batch out of range) is an error status,
// not a violation.
absl::StatusOr<SimResult> Simulate(const BlockModel& model, const Schedule& schedule);

// The schedule whose device orders follow given start times (ties by block id):
// every instance of `microbatches` micro-batches must have a start.
Schedule ScheduleFromTimes(const BlockModel& model, int microbatches,
                           const std::vector<int64_t>& start);

// "F0", "B3.7" style label of an instance: block name, micro-batch.
std::string InstanceLabel(const BlockModel& model, const Instance& instance);

// Versioned JSON form of a schedule with its block model (docs/formats.md).
inline constexpr int kScheduleJsonVersion = 1;
std::string ScheduleToJson(const BlockModel& model, const Schedule& schedule,
                           const SimResult* sim = nullptr);
struct LoadedSchedule {
  BlockModel model;
  Schedule schedule;
};
absl::StatusOr<LoadedSchedule> ScheduleFromJson(absl::string_view text,
                                                absl::string_view filename = "<schedule>");
absl::StatusOr<LoadedSchedule> LoadScheduleFile(const std::string& path);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_SCHEDULE_H_
