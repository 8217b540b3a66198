// Device queries through the CUDA runtime and NCCL.

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "exec/cuda/entry_points.h"

extern "C" int LoomCudaSmoke(int n, float value, float* host_out);

namespace loom::exec::cuda {

std::string NoGpuReason(int cuda_error, int count) {
  const auto err = static_cast<cudaError_t>(cuda_error);
  if (err == cudaSuccess && count == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return visible != nullptr
               ? absl::StrCat("no CUDA GPU is visible (CUDA_VISIBLE_DEVICES='", visible, "')")
               : "no CUDA GPU on this machine";
  }
  if (err == cudaErrorNoDevice) return "no CUDA GPU on this machine";
  if (err == cudaErrorInsufficientDriver) {
    // The runtime says this both when the driver is old and when there is none.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) {
      return "no NVIDIA driver on this machine (libcuda.so.1 is not installed)";
    }
    dlclose(driver);
    return absl::StrCat("the NVIDIA driver is older than the CUDA runtime Loom was built with (",
                        cudaGetErrorString(err), "): update the driver");
  }
  return cudaGetErrorString(err);
}

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::UnavailableError(NoGpuReason(err, count));
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
