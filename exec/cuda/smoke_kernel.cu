// A minimal kernel that proves the toolchain, driver and device work end to end.
// Kept free of Abseil so that nvcc only sees CUDA headers.

#include <cuda_runtime.h>

namespace {

__global__ void FillKernel(float* out, int n, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value * static_cast<float>(i);
}

}  // namespace

// Writes value * i into host_out[i] for i < n by way of the device.
// Returns a cudaError_t code (0 on success).
extern "C" int LoomCudaSmoke(int n, float value, float* host_out) {
  float* device = nullptr;
  cudaError_t err = cudaMalloc(&device, sizeof(float) * n);
  if (err != cudaSuccess) return err;
  FillKernel<<<(n + 255) / 256, 256>>>(device, n, value);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    err = cudaMemcpy(host_out, device, sizeof(float) * n, cudaMemcpyDeviceToHost);
  }
  cudaFree(device);
  return err;
}
