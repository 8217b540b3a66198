#include "exec/backend.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::exec {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(absl::string_view name,
                                                     const ExecOptions& options) {
  if (name == "cpu") return MakeCpuBackend(options);
  if (name == "cuda") return MakeCudaBackend(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected cpu or cuda)"));
}

}  // namespace loom::exec
