#ifndef LOOM_SCHEDULE_PREDEFINED_H_
#define LOOM_SCHEDULE_PREDEFINED_H_

namespace loom::schedule {}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_PREDEFINED_H_
