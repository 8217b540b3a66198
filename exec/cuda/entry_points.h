#ifndef LOOM_EXEC_CUDA_ENTRY_POINTS_H_
#define LOOM_EXEC_CUDA_ENTRY_POINTS_H_

// The plugin's implementations of the CUDA entry points of exec/backend.h and
// exec/device_query.h (same contracts), which exec/cuda/plugin.cc hands to the
// loader (exec/cuda_plugin.h).

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/backend.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec::cuda {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const ExecOptions& options);
absl::StatusOr<std::vector<ir::HostTensor>> RunTask(const ir::Task& task,
                                                    absl::Span<const ir::HostTensor* const> in,
                                                    ir::DType precision, bool* on_gpu);
absl::StatusOr<int> DeviceCount();
// Why no GPU can be used, in the user's words, from what cudaGetDeviceCount
// returned (its error code, and the count when it succeeded): no driver installed,
// a driver older than the runtime, no device, none visible.
std::string NoGpuReason(int cuda_error, int count);
absl::StatusOr<std::string> NcclVersion();
absl::Status SmokeTest();

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_ENTRY_POINTS_H_
