// Builds without a CUDA backend.

#include "absl/status/status.h"
#include "exec/backend.h"

namespace loom::exec {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const ExecOptions&) {
  return absl::UnavailableError("this build of Loom has no CUDA backend");
}

}  // namespace loom::exec
