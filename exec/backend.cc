#include "exec/backend.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::exec {

void MemoryMeter::Hold(ir::ValueId v, int64_t elements) {
  const int64_t bytes = elements * bytes_per_element_;
  live_ += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, live_);
  if (program_.activation[v]) {
    live_activations_ += bytes;
    stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, live_activations_);
  }
}

void MemoryMeter::Release(ir::ValueId v, int64_t elements) {
  const int64_t bytes = elements * bytes_per_element_;
  live_ -= bytes;
  if (program_.activation[v]) live_activations_ -= bytes;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(absl::string_view name,
                                                     const ExecOptions& options) {
  if (name == "cpu") return MakeCpuBackend(options);
  if (name == "cuda") return MakeCudaBackend(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected cpu or cuda)"));
}

}  // namespace loom::exec
