#include "schedule/render.h"

namespace loom::schedule {}  // namespace loom::schedule
