// Kernels of the attention ops (attention_kernels.h): the masked softmax and the
// gradient of one given its log-sum-exp, one block per row with shared-memory
// reductions in double, and rotary position embedding, one thread per rotated pair.

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

// The keys query i sees: every key, or with `causal` keys 0 .. i + shift.
__device__ int64_t VisibleKeys(int64_t i, int64_t t, bool causal, int64_t shift) {
  if (!causal) return t;
  const int64_t n = i + shift + 1;
  return n < 0 ? 0 : (n > t ? t : n);
}

template <typename T>
__global__ void MaskedSoftmaxKernel(T* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                    int64_t shift, T* lse, int64_t lse_stride) {
  __shared__ double shared[grid::kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* row = scores + r * t;
    const int64_t n = VisibleKeys(r % s, t, causal, shift);
    double top = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) top = fmax(top, static_cast<double>(row[j]));
    top = BlockMax(top, shared);
    double total = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) total += exp(static_cast<double>(row[j]) - top);
    total = BlockSum(total, shared);
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      row[j] = j < n ? static_cast<T>(exp(static_cast<double>(row[j]) - top) / total) : T(0);
    }
    if (lse != nullptr && threadIdx.x == 0) {
      // Row r is query r % s of the group's head r / s.
      lse[(r % s) * lse_stride + r / s] = static_cast<T>(n == 0 ? -INFINITY : top + log(total));
    }
    __syncthreads();
  }
}

// Scores become P = exp(score - lse) on the visible keys (0 elsewhere) and dp
// becomes dS = P * (dp - rowsum(dout * out) + dlse); row r is query r % s of head
// r / s; dlse may be null (0).
template <typename T>
__global__ void FlashSoftmaxBackwardKernel(T* p, T* dp, int64_t rows, int64_t s, int64_t t,
                                           bool causal, int64_t shift, const T* lse,
                                           const T* dlse, const T* out, const T* dout,
                                           int64_t hq, int64_t dv) {
  __shared__ double shared[grid::kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r % s, head = r / s;
    const T* o_row = out + (i * hq + head) * dv;
    const T* do_row = dout + (i * hq + head) * dv;
    double dot = 0;
    for (int64_t x = threadIdx.x; x < dv; x += blockDim.x) {
      dot += static_cast<double>(do_row[x]) * static_cast<double>(o_row[x]);
    }
    dot = BlockSum(dot, shared);
    if (dlse != nullptr) dot -= static_cast<double>(dlse[i * hq + head]);
    const double row_lse = static_cast<double>(lse[i * hq + head]);
    const int64_t n = VisibleKeys(i, t, causal, shift);
    T* pr = p + r * t;
    T* dr = dp + r * t;
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      const double w = j < n ? exp(static_cast<double>(pr[j]) - row_lse) : 0.0;
      pr[j] = static_cast<T>(w);
      dr[j] = static_cast<T>(w * (static_cast<double>(dr[j]) - dot));
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
                           double theta, double sign, int64_t offset) {
  const int64_t half = d / 2;
  for (int64_t p = grid::FirstIndex(); p < pairs; p += grid::Stride()) {
    const int64_t i = p % half;
    const int64_t row = p / half;
    const int64_t pos = offset + (row / heads) % seq;
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
cudaError_t Rope(const DeviceTensor& x, double theta, bool inverse, int64_t offset,
                 const DeviceTensor& out, cudaStream_t stream) {
  const int64_t d = x.dim(3);
  const int64_t pairs = x.Product(0, 3) * (d / 2);
  if (pairs == 0) return cudaSuccess;
  RopeKernel<T><<<grid::Blocks(pairs), grid::kThreads, 0, stream>>>(
      x.as<const T>(), out.as<T>(), pairs, x.dim(1), x.dim(2), d, theta, inverse ? -1.0 : 1.0,
      offset);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMaskedSoftmax(void* scores, int64_t rows, int64_t s, int64_t t, bool causal,
                                int64_t shift, void* lse, int64_t lse_stride, bool f64,
                                cudaStream_t stream) {
  if (f64) {
    MaskedSoftmaxKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<double*>(scores), rows, s, t, causal, shift, static_cast<double*>(lse),
        lse_stride);
  } else {
    MaskedSoftmaxKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<float*>(scores), rows, s, t, causal, shift, static_cast<float*>(lse),
        lse_stride);
  }
  return cudaGetLastError();
}

cudaError_t LaunchFlashSoftmaxBackward(void* p, void* dp, int64_t rows, int64_t s, int64_t t,
                                       bool causal, int64_t shift, const void* lse,
                                       const void* dlse, const void* out, const void* dout,
                                       int64_t hq, int64_t dv, bool f64, cudaStream_t stream) {
  if (f64) {
    FlashSoftmaxBackwardKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<double*>(p), static_cast<double*>(dp), rows, s, t, causal, shift,
        static_cast<const double*>(lse), static_cast<const double*>(dlse),
        static_cast<const double*>(out), static_cast<const double*>(dout), hq, dv);
  } else {
    FlashSoftmaxBackwardKernel<<<RowBlocks(rows), grid::kThreads, 0, stream>>>(
        static_cast<float*>(p), static_cast<float*>(dp), rows, s, t, causal, shift,
        static_cast<const float*>(lse), static_cast<const float*>(dlse),
        static_cast<const float*>(out), static_cast<const float*>(dout), hq, dv);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(const DeviceTensor& x, double theta, bool inverse, int64_t offset,
                       const DeviceTensor& out, cudaStream_t stream) {
  return x.f64 ? Rope<double>(x, theta, inverse, offset, out, stream)
               : Rope<float>(x, theta, inverse, offset, out, stream);
}

}  // namespace loom::exec::cuda
