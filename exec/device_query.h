#ifndef LOOM_EXEC_DEVICE_QUERY_H_
#define LOOM_EXEC_DEVICE_QUERY_H_

#include <string>

#include "absl/status/statusor.h"

namespace loom::exec {

// True when this build contains the CUDA/NCCL backend.
bool BuiltWithCuda();

// Number of CUDA devices visible to this process. Unimplemented in a build without
// CUDA; Unavailable when the driver finds no usable device.
absl::StatusOr<int> CudaDeviceCount();

// "NCCL 2.x.y" in a CUDA build; Unimplemented otherwise.
absl::StatusOr<std::string> NcclVersion();

// Runs a small kernel on device 0 and checks what it wrote. Unimplemented without
// CUDA; Unavailable when no device can run it.
absl::Status CudaSmokeTest();

}  // namespace loom::exec

#endif  // LOOM_EXEC_DEVICE_QUERY_H_
