// Device queries through the CUDA runtime and NCCL.

#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "exec/cuda/entry_points.h"

extern "C" int LoomCudaSmoke(int n, float value, float* host_out);

namespace loom::exec::cuda {

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", cudaGetErrorString(err)));
  }
  return count;
}

absl::StatusOr<std::string> NcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    return absl::UnavailableError("ncclGetVersion failed");
  }
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return absl::StrCat("NCCL ", version / 10000, ".", (version % 10000) / 100, ".",
                      version % 100);
}

absl::Status SmokeTest() {
  constexpr int kN = 1000;
  std::vector<float> out(kN, -1.0f);
  int err = LoomCudaSmoke(kN, 0.5f, out.data());
  if (err != 0) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA smoke kernel: ", cudaGetErrorString(static_cast<cudaError_t>(err))));
  }
  for (int i = 0; i < kN; ++i) {
    if (out[i] != 0.5f * static_cast<float>(i)) {
      return absl::InternalError(absl::StrCat("CUDA smoke kernel wrote ", out[i], " at ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::exec::cuda
