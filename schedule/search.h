#ifndef LOOM_SCHEDULE_SEARCH_H_
#define LOOM_SCHEDULE_SEARCH_H_

namespace loom::schedule {}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_SEARCH_H_
