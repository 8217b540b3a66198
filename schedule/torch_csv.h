#ifndef LOOM_SCHEDULE_TORCH_CSV_H_
#define LOOM_SCHEDULE_TORCH_CSV_H_

namespace loom::schedule {}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_TORCH_CSV_H_
