// Builds without a CUDA backend.

#include "absl/status/status.h"
#include "exec/backend.h"

namespace loom::exec {

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const ExecOptions&) {
  return absl::UnavailableError("this build of Loom has no CUDA backend");
}

absl::StatusOr<std::vector<ir::HostTensor>> RunTaskOnCuda(const ir::Task&,
                                                          absl::Span<const ir::HostTensor* const>,
                                                          ir::DType, bool*) {
  return absl::UnavailableError("this build of Loom has no CUDA backend");
}

}  // namespace loom::exec
