#include "schedule/plan_blocks.h"

namespace loom::schedule {}  // namespace loom::schedule
