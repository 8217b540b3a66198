// Kernels of the matrix-product family: bias rows, masked softmax and its
// gradient for attention.

#include "exec/cuda/matmul_kernels.h"

#include <cmath>

namespace loom::exec::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

template <typename T>
__global__ void AddBiasKernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

// One block per row; shared-memory reductions in double.
__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

__device__ double BlockMax(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const double top = shared[0];
  __syncthreads();
  return top;
}

template <typename T>
__global__ void MaskedSoftmaxKernel(T* scores, int64_t rows, int64_t s, int64_t t, bool causal) {
  __shared__ double shared[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* row = scores + r * t;
    const int64_t n = causal ? (r % s) + 1 : t;
    double top = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) top = fmax(top, static_cast<double>(row[j]));
    top = BlockMax(top, shared);
    double total = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) total += exp(static_cast<double>(row[j]) - top);
    total = BlockSum(total, shared);
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      row[j] = j < n ? static_cast<T>(exp(static_cast<double>(row[j]) - top) / total) : T(0);
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void SoftmaxBackwardKernel(const T* p, T* dp, int64_t rows, int64_t t) {
  __shared__ double shared[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* pr = p + r * t;
    T* dr = dp + r * t;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      dot += static_cast<double>(pr[j]) * static_cast<double>(dr[j]);
    }
    dot = BlockSum(dot, shared);
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      dr[j] = static_cast<T>(static_cast<double>(pr[j]) * (static_cast<double>(dr[j]) - dot));
    }
    __syncthreads();
  }
}

int RowBlocks(int64_t rows) { return static_cast<int>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535); }

}  // namespace

cudaError_t LaunchAddBias(void* y, const void* bias, int64_t rows, int64_t cols, bool f64,
                          cudaStream_t stream) {
  if (f64) {
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
        static_cast<double*>(y), static_cast<const double*>(bias), rows, cols);
  } else {
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
        static_cast<float*>(y), static_cast<const float*>(bias), rows, cols);
  }
  return cudaGetLastError();
}

cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                bool f64, cudaStream_t stream) {
  if (f64) {
    MaskedSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<double*>(scores),
                                                                  rows, s, t, causal);
  } else {
    MaskedSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<float*>(scores),
                                                                  rows, s, t, causal);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t t, bool f64,
                                  cudaStream_t stream) {
  if (f64) {
    SoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
        static_cast<const double*>(p), static_cast<double*>(dp), rows, t);
  } else {
    SoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
        static_cast<const float*>(p), static_cast<float*>(dp), rows, t);
  }
  return cudaGetLastError();
}

}  // namespace loom::exec::cuda
