// Kernels of the attention ops (attention_kernels.h): the masked softmax and its
// gradient, one block per row with shared-memory reductions in double, and rotary
// position embedding, one thread per rotated pair.

#include "exec/cuda/attention_kernels.h"

#include <cmath>
#include <cstdint>

#include "exec/cuda/grid_stride.h"
#include "exec/cuda/rounded_arith.cuh"

namespace loom::exec::cuda {
namespace {

// ---- masked softmax ------------------------------------------------------------

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
  __shared__ double shared[grid::kThreads];
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
  __shared__ double shared[grid::kThreads];
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

// ---- rotary position embedding -------------------------------------------------

// One thread per rotated pair: `row` indexes [b, pos, h] of a [B, L, H, D] tensor
// and `i` < D/2 the pair (i, i + D/2) within it.
template <typename T>
__global__ void RopeKernel(const T* x, T* out, int64_t pairs, int64_t seq, int64_t heads, int64_t d,
                           double theta, double sign) {
  const int64_t half = d / 2;
  for (int64_t p = grid::FirstIndex(); p < pairs; p += grid::Stride()) {
    const int64_t i = p % half;
    const int64_t row = p / half;
    const int64_t pos = (row / heads) % seq;
    const double exponent = rn::Div(rn::Mul(-2.0, static_cast<double>(i)), static_cast<double>(d));
    const double angle = rn::Mul(rn::Mul(sign, static_cast<double>(pos)), pow(theta, exponent));
    const double c = cos(angle);
    const double sn = sin(angle);
    const int64_t at = row * d + i;
    const double x1 = static_cast<double>(x[at]);
    const double x2 = static_cast<double>(x[at + half]);
    out[at] = static_cast<T>(rn::Sub(rn::Mul(x1, c), rn::Mul(x2, sn)));
    out[at + half] = static_cast<T>(rn::Add(rn::Mul(x2, c), rn::Mul(x1, sn)));
  }
}

template <typename T>
cudaError_t Rope(const DeviceTensor& x, double theta, bool inverse, const DeviceTensor& out,
                 cudaStream_t stream) {
  const int64_t d = x.dim(3);
  const int64_t pairs = x.Product(0, 3) * (d / 2);
  if (pairs == 0) return cudaSuccess;
  RopeKernel<T><<<grid::Blocks(pairs), grid::kThreads, 0, stream>>>(
      x.as<const T>(), out.as<T>(), pairs, x.dim(1), x.dim(2), d, theta, inverse ? -1.0 : 1.0);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                bool f64, cudaStream_t stream) {
  if (f64) {
    MaskedSoftmaxKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<double*>(scores), rows, s, t, causal);
  } else {
    MaskedSoftmaxKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<float*>(scores), rows, s, t, causal);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t t, bool f64,
                                  cudaStream_t stream) {
  if (f64) {
    SoftmaxBackwardKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<const double*>(p), static_cast<double*>(dp), rows, t);
  } else {
    SoftmaxBackwardKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<const float*>(p), static_cast<float*>(dp), rows, t);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(const DeviceTensor& x, double theta, bool inverse, const DeviceTensor& out,
                       cudaStream_t stream) {
  return x.f64 ? Rope<double>(x, theta, inverse, out, stream)
               : Rope<float>(x, theta, inverse, out, stream);
}

}  // namespace loom::exec::cuda
