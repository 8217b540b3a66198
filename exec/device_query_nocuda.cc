// Device queries for a build without the CUDA toolkit.

#include "absl/status/status.h"
#include "exec/device_query.h"

namespace loom::exec {

bool BuiltWithCuda() { return false; }

absl::StatusOr<int> CudaDeviceCount() {
  return absl::UnimplementedError("this build of Loom has no CUDA backend");
}

absl::StatusOr<std::string> NcclVersion() {
  return absl::UnimplementedError("this build of Loom has no CUDA backend");
}

absl::Status CudaSmokeTest() {
  return absl::UnimplementedError("this build of Loom has no CUDA backend");
}

}  // namespace loom::exec
