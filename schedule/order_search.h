#ifndef LOOM_SCHEDULE_ORDER_SEARCH_H_
#define LOOM_SCHEDULE_ORDER_SEARCH_H_

// Local search over the per-device orders of a schedule, for small problems: one
// instance is moved to another place in one device's order, the schedule re-timed as
// soon as possible by the simulator, and the move kept when the simulator finds it
// valid (caps kept, no deadlock) and no longer; moves that keep the makespan are kept
// too, so that the search crosses plateaus. It finds schedules that the search by
// start times reaches only after many deviations from its own order (a device left
// idle for a while so that memory is freed first, say). Deterministic for a seed.

#include <chrono>
#include <cstdint>
#include <optional>

#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// The schedule after at most `moves` moves from `start` (a valid schedule of the
// model) before `deadline`, when it is shorter than `start`; nullopt otherwise. Named
// "local".
std::optional<Schedule> ImproveOrders(const BlockModel& model, const Schedule& start,
                                      int64_t moves, uint64_t seed,
                                      std::chrono::steady_clock::time_point deadline);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_ORDER_SEARCH_H_
