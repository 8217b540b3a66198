#include "exec/backend.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::exec {

// Defined by the CUDA backend's sources, or by cuda_backend_none.cc.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const ExecOptions& options);

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(absl::string_view name,
                                                     const ExecOptions& options) {
  if (name == "cpu") return MakeCpuBackend(options);
  if (name == "cuda") return MakeCudaBackend(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected cpu or cuda)"));
}

}  // namespace loom::exec
