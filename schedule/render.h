#ifndef LOOM_SCHEDULE_RENDER_H_
#define LOOM_SCHEDULE_RENDER_H_

namespace loom::schedule {}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_RENDER_H_
