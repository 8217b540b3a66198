#include "schedule/search.h"

namespace loom::schedule {}  // namespace loom::schedule
