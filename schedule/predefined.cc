#include "schedule/predefined.h"

namespace loom::schedule {}  // namespace loom::schedule
