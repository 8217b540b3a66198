#ifndef LOOM_SCHEDULE_LIST_SCHEDULE_H_
#define LOOM_SCHEDULE_LIST_SCHEDULE_H_

// Greedy list schedules of N micro-batches: block instances are started one at a
// time, each as early as its dependencies (with their lags) and its devices allow,
// and only when its memory delta keeps every one of its devices within its cap. Of
// the instances that could start earliest, a priority rule picks one. They complement
// the repetend search where it is weakest: few micro-batches (the ramps are most of
// the schedule) and caps so tight that little overlaps.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

enum class ListPriority {
  // The lowest micro-batch first, then the longest path to the end of the
  // micro-batch: micro-batches flow through in order (GPipe-like when memory allows).
  kMicrobatchFirst,
  // Blocks that free memory first, then the lowest micro-batch: backward work
  // drains in-flight micro-batches as soon as it can (1F1B-like under tight caps).
  kFreeMemoryFirst,
  // The longest path to the end of the micro-batch first, then the lowest
  // micro-batch: the critical path leads.
  kCriticalPathFirst,
};

// Every rule, in the order the search tries them.
std::vector<ListPriority> ListPriorities();
std::string ListPriorityName(ListPriority priority);

// A randomised list schedule for small problems: the ready instance whose key is
// least goes next, at the earliest time its dependencies and devices allow (not
// necessarily the earliest of all ready ones, so it may leave a device idle to keep
// a cap). Keys are the micro-batch index plus a random amount drawn from `seed`
// (deterministic), scaled by `spread`: 0 keeps micro-batches strictly in order.
// Named "list/random"; nullopt on a dead end.
std::optional<Schedule> RandomListSchedule(const BlockModel& model, const ModelFacts& facts,
                                           int microbatches, uint64_t seed, double spread);

// The list schedule of `microbatches` copies of `model` under its caps with the given
// rule, named "list/<rule>"; nullopt when the rule runs into a dead end (every
// instance that could start would exceed a cap while nothing is running). `facts`
// must be AnalyzeBlockModel(model).
std::optional<Schedule> ListSchedule(const BlockModel& model, const ModelFacts& facts,
                                     int microbatches, ListPriority priority);

// Micro-batches one after another on every device: one order of a micro-batch's
// blocks (a topological order whose running memory stays within every device's cap,
// found by a depth-first search of at most `node_limit` nodes), repeated N times in
// each device's order, named "serial". The simulator still overlaps micro-batches
// across devices where the orders allow. nullopt when no such order was found;
// whether the repetition keeps within the caps (micro-batches that keep memory) is
// the simulator's to tell.
std::optional<Schedule> SerialSchedule(const BlockModel& model, const ModelFacts& facts,
                                       int microbatches, int64_t node_limit);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_LIST_SCHEDULE_H_
