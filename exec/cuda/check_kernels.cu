// Checks of integer operands (check_kernels.h).

#include "exec/cuda/check_kernels.h"

#include <cmath>

namespace loom::exec::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void FindBadKernel(const T* ids, int64_t n, int64_t upper,
                              unsigned long long* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(ids[i]);
    const bool bad = !(v >= 0) || v != floor(v) || (upper > 0 && !(v < static_cast<double>(upper)));
    if (bad) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

}  // namespace

cudaError_t FindBadIndex(const DeviceTensor& ids, int64_t upper, cudaStream_t stream,
                         int64_t* position, double* value) {
  *position = -1;
  const int64_t n = ids.size();
  if (n == 0) return cudaSuccess;
  unsigned long long* first = nullptr;
  cudaError_t err = cudaMallocAsync(&first, sizeof(*first), stream);
  if (err != cudaSuccess) return err;
  const unsigned long long none = ~0ull;
  cudaMemcpyAsync(first, &none, sizeof(none), cudaMemcpyHostToDevice, stream);
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 4096 ? want : 4096);
  if (ids.f64) {
    FindBadKernel<<<blocks, kThreads, 0, stream>>>(ids.as<double>(), n, upper, first);
  } else {
    FindBadKernel<<<blocks, kThreads, 0, stream>>>(ids.as<float>(), n, upper, first);
  }
  err = cudaGetLastError();
  unsigned long long found = none;
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(&found, first, sizeof(found), cudaMemcpyDeviceToHost, stream);
  }
  cudaFreeAsync(first, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess || found == none) return err;
  *position = static_cast<int64_t>(found);
  if (ids.f64) {
    err = cudaMemcpy(value, ids.as<double>() + found, sizeof(double), cudaMemcpyDeviceToHost);
  } else {
    float f = 0;
    err = cudaMemcpy(&f, ids.as<float>() + found, sizeof(float), cudaMemcpyDeviceToHost);
    *value = f;
  }
  return err;
}

}  // namespace loom::exec::cuda
