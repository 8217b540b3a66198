#ifndef LOOM_SCHEDULE_PLAN_BLOCKS_H_
#define LOOM_SCHEDULE_PLAN_BLOCKS_H_

namespace loom::schedule {}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_PLAN_BLOCKS_H_
