#include "schedule/torch_csv.h"

namespace loom::schedule {}  // namespace loom::schedule
