// Kernels of the reductions (see reduce_kernels.h). Arithmetic that must round
// exactly as the reference's host code goes through the __d*_rn intrinsics, which
// nvcc never contracts into fused multiply-adds. The softmaxes use the row layout of
// row_kernels.cuh.

#include "exec/cuda/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "exec/cuda/row_kernels.cuh"
#include "exec/cuda/strided_launch.cuh"

namespace loom::exec::cuda {
namespace {

// Reductions at least this long over the innermost dim use a block per output.
constexpr int64_t kBlockReduceMin = 4096;

// ---- reductions over a set of dims --------------------------------------------------

// Output element o sums src[kept offset of o + reduced offset of r] over
// r < count. Both dim lists are in input order with their input strides; the
// output is row-major over the kept dims.
struct ReduceGeom {
  int kept_rank = 0;
  int red_rank = 0;
  int64_t num_out = 1;
  int64_t count = 1;
  int64_t kept_extent[kMaxRank] = {};
  int64_t kept_stride[kMaxRank] = {};
  int64_t red_extent[kMaxRank] = {};
  int64_t red_stride[kMaxRank] = {};
};

// Appends a dim to one of ReduceGeom's lists, merging it into the previous entry
// when that entry is its outer neighbour in the input.
void AppendDim(int64_t extent, int64_t stride, int& rank, int64_t* extents, int64_t* strides) {
  if (rank > 0 && strides[rank - 1] == stride * extent) {
    extents[rank - 1] *= extent;
    strides[rank - 1] = stride;
    return;
  }
  extents[rank] = extent;
  strides[rank] = stride;
  ++rank;
}

ReduceGeom MakeReduceGeom(const DeviceTensor& src, uint32_t reduced_dims) {
  int64_t strides[kMaxRank];
  strided::RowMajorStrides(src, strides);
  ReduceGeom g;
  for (int d = 0; d < src.rank; ++d) {
    const int64_t e = src.dims[d];
    if ((reduced_dims >> d) & 1u) {
      g.count *= e;
      if (e != 1) AppendDim(e, strides[d], g.red_rank, g.red_extent, g.red_stride);
    } else {
      g.num_out *= e;
      if (e != 1) AppendDim(e, strides[d], g.kept_rank, g.kept_extent, g.kept_stride);
    }
  }
  return g;
}

__device__ inline int64_t KeptOffset(const ReduceGeom& g, int64_t o) {
  int64_t off = 0;
  for (int k = g.kept_rank - 1; k >= 0; --k) {
    off += (o % g.kept_extent[k]) * g.kept_stride[k];
    o /= g.kept_extent[k];
  }
  return off;
}

__device__ inline int64_t ReducedOffset(const ReduceGeom& g, int64_t r) {
  if (g.red_rank == 1) return r * g.red_stride[0];
  int64_t off = 0;
  for (int k = g.red_rank - 1; k >= 0; --k) {
    off += (r % g.red_extent[k]) * g.red_stride[k];
    r /= g.red_extent[k];
  }
  return off;
}

template <ReduceKind K>
__device__ inline double Accumulate(double sum, double x) {
  if (K == ReduceKind::kSumSquares) return __dadd_rn(sum, __dmul_rn(x, x));
  return __dadd_rn(sum, x);
}

template <typename T, ReduceKind K>
__device__ inline T Finish(double sum, double count) {
  if (K == ReduceKind::kMean) return static_cast<T>(__ddiv_rn(sum, count));
  return static_cast<T>(sum);
}

// One thread per output element, visiting its inputs in row-major order.
template <typename T, ReduceKind K>
__global__ void ReduceThreadKernel(const T* src, T* dst, ReduceGeom g, double count) {
  for (int64_t o = strided::GlobalThread(); o < g.num_out; o += strided::GridThreads()) {
    int64_t off = KeptOffset(g, o);
    double sum = 0.0;
    if (g.red_rank <= 1) {
      const int64_t stride = g.red_rank == 1 ? g.red_stride[0] : 0;
      for (int64_t r = 0; r < g.count; ++r) {
        sum = Accumulate<K>(sum, static_cast<double>(src[off + r * stride]));
      }
    } else {
      int64_t index[kMaxRank] = {};
      for (int64_t r = 0; r < g.count; ++r) {
        sum = Accumulate<K>(sum, static_cast<double>(src[off]));
        for (int k = g.red_rank - 1; k >= 0; --k) {
          off += g.red_stride[k];
          if (++index[k] < g.red_extent[k]) break;
          off -= g.red_stride[k] * g.red_extent[k];
          index[k] = 0;
        }
      }
    }
    dst[o] = Finish<T, K>(sum, count);
  }
}

// One block per output element: each thread sums a strided share of the inputs,
// then the block adds the partial sums in a fixed tree order.
template <typename T, ReduceKind K>
__global__ void ReduceBlockKernel(const T* src, T* dst, ReduceGeom g, double count) {
  __shared__ double partial[strided::kThreads];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < g.num_out; o += gridDim.x) {
    const int64_t base = KeptOffset(g, o);
    double sum = 0.0;
    for (int64_t r = t; r < g.count; r += strided::kThreads) {
      sum = Accumulate<K>(sum, static_cast<double>(src[base + ReducedOffset(g, r)]));
    }
    partial[t] = sum;
    __syncthreads();
    for (int w = strided::kThreads / 2; w > 0; w >>= 1) {
      if (t < w) partial[t] = __dadd_rn(partial[t], partial[t + w]);
      __syncthreads();
    }
    if (t == 0) dst[o] = Finish<T, K>(partial[0], count);
    __syncthreads();  // partial[0] is read before the next output overwrites it
  }
}

template <typename T, ReduceKind K>
cudaError_t EnqueueReduce(const DeviceTensor& src, const ReduceGeom& g, double count,
                          const DeviceTensor& dst, cudaStream_t stream) {
  const bool innermost_reduced = g.red_rank > 0 && g.red_stride[g.red_rank - 1] == 1;
  if (innermost_reduced && g.count >= kBlockReduceMin) {
    const int blocks = static_cast<int>(std::min<int64_t>(g.num_out, strided::kMaxBlocks));
    ReduceBlockKernel<T, K><<<blocks, strided::kThreads, 0, stream>>>(src.as<const T>(),
                                                                      dst.as<T>(), g, count);
  } else {
    ReduceThreadKernel<T, K><<<strided::BlocksFor(g.num_out), strided::kThreads, 0, stream>>>(
        src.as<const T>(), dst.as<T>(), g, count);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t EnqueueReduceKind(ReduceKind kind, const DeviceTensor& src, const ReduceGeom& g,
                              double count, const DeviceTensor& dst, cudaStream_t stream) {
  switch (kind) {
    case ReduceKind::kSum:
      return EnqueueReduce<T, ReduceKind::kSum>(src, g, count, dst, stream);
    case ReduceKind::kMean:
      return EnqueueReduce<T, ReduceKind::kMean>(src, g, count, dst, stream);
    case ReduceKind::kSumSquares:
      return EnqueueReduce<T, ReduceKind::kSumSquares>(src, g, count, dst, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- max along one dim ------------------------------------------------------------------

// A tensor seen as [outer, n, inner] around the reduced dim.
struct AxisGeom {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};

AxisGeom MakeAxisGeom(const DeviceTensor& t, int dim) {
  AxisGeom g;
  g.outer = t.Product(0, dim);
  g.n = t.dims[dim];
  g.inner = t.Product(dim + 1, t.rank);
  return g;
}

// The reference's argmax: start at position 0 and move only to a strictly
// greater value. Reads a[base + k * stride] for k < n; n >= 1.
template <typename T>
__device__ inline int64_t FirstArgMax(const T* a, int64_t base, int64_t n, int64_t stride) {
  int64_t best = 0;
  T best_value = a[base];
  for (int64_t k = 1; k < n; ++k) {
    const T x = a[base + k * stride];
    if (x > best_value) {
      best_value = x;
      best = k;
    }
  }
  return best;
}

// The same argmax with a block over one contiguous row a[base, base + n). The
// sequential rule picks position 0 when a[base] is NaN and otherwise the first
// position of the largest non-NaN value; each thread keeps the first largest
// non-NaN value of its share, and the tree keeps the larger value, the lower
// position on a tie. Every thread of the block must call it.
template <typename T>
__device__ int64_t BlockFirstArgMax(const T* a, int64_t base, int64_t n) {
  __shared__ T values[strided::kThreads];
  __shared__ int64_t positions[strided::kThreads];
  const int t = threadIdx.x;
  T best_value = T(0);
  int64_t best = -1;  // none yet
  for (int64_t k = t; k < n; k += strided::kThreads) {
    const T x = a[base + k];
    if (x == x && (best < 0 || x > best_value)) {
      best_value = x;
      best = k;
    }
  }
  values[t] = best_value;
  positions[t] = best;
  __syncthreads();
  for (int w = strided::kThreads / 2; w > 0; w >>= 1) {
    if (t < w) {
      const T v = values[t + w];
      const int64_t p = positions[t + w];
      if (p >= 0 && (positions[t] < 0 || v > values[t] ||
                     (v == values[t] && p < positions[t]))) {
        values[t] = v;
        positions[t] = p;
      }
    }
    __syncthreads();
  }
  const T first = a[base];
  const int64_t result = (first != first || positions[0] < 0) ? 0 : positions[0];
  __syncthreads();  // the shared arrays are free again on return
  return result;
}

// With dy == nullptr: out[j] = max. Otherwise out (shaped like a) receives dy[j]
// at the argmax. j = o * inner + i.
template <typename T>
__global__ void MaxThreadKernel(const T* a, const T* dy, T* out, AxisGeom g) {
  const int64_t total = g.outer * g.inner;
  for (int64_t j = strided::GlobalThread(); j < total; j += strided::GridThreads()) {
    const int64_t base = (j / g.inner) * g.n * g.inner + j % g.inner;
    const int64_t best = FirstArgMax(a, base, g.n, g.inner);
    if (dy == nullptr) {
      out[j] = a[base + best * g.inner];
    } else {
      out[base + best * g.inner] = dy[j];
    }
  }
}

// MaxThreadKernel for inner == 1, one block per row.
template <typename T>
__global__ void MaxBlockKernel(const T* a, const T* dy, T* out, AxisGeom g) {
  for (int64_t o = blockIdx.x; o < g.outer; o += gridDim.x) {
    const int64_t base = o * g.n;
    const int64_t best = BlockFirstArgMax(a, base, g.n);
    if (threadIdx.x == 0) {
      if (dy == nullptr) {
        out[o] = a[base + best];
      } else {
        out[base + best] = dy[o];
      }
    }
  }
}

template <typename T>
cudaError_t EnqueueMax(const DeviceTensor& a, const T* dy, const AxisGeom& g, T* out,
                       cudaStream_t stream) {
  if (g.outer * g.inner == 0) return cudaSuccess;
  if (g.inner == 1 && g.n >= kBlockReduceMin) {
    const int blocks = static_cast<int>(std::min<int64_t>(g.outer, strided::kMaxBlocks));
    MaxBlockKernel<T><<<blocks, strided::kThreads, 0, stream>>>(a.as<const T>(), dy, out, g);
  } else {
    MaxThreadKernel<T><<<strided::BlocksFor(g.outer * g.inner), strided::kThreads, 0, stream>>>(
        a.as<const T>(), dy, out, g);
  }
  return cudaGetLastError();
}

// ---- softmax kernels ------------------------------------------------------------

// softmax: y = exp(x - max) / sum; log_softmax: y = x - logsumexp(x).
template <typename T, bool kLog>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    SoftmaxKernel(const T* x, int64_t rows, int64_t n, T* y) {
  __shared__ double shared[rows::kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    const rows::ExpSum e = rows::RowExpSum(row, n, shared);
    const double lse = e.max + log(e.sum);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double v = static_cast<double>(row[j]);
      y[r * n + j] = static_cast<T>(kLog ? v - lse : exp(v - e.max) / e.sum);
    }
  }
}

// softmax_grad: dx = y * (dy - sum(y * dy)); log_softmax_grad: dx = dy - exp(y) * sum(dy).
template <typename T, bool kLog>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    SoftmaxGradKernel(const T* y, const T* dy, int64_t rows, int64_t n, T* dx) {
  __shared__ double shared[rows::kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double g = static_cast<double>(dy[base + j]);
      sum += kLog ? g : static_cast<double>(y[base + j]) * g;
    }
    sum = rows::BlockSum(sum, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double yv = static_cast<double>(y[base + j]);
      const double g = static_cast<double>(dy[base + j]);
      dx[base + j] = static_cast<T>(kLog ? g - exp(yv) * sum : yv * (g - sum));
    }
  }
}

}  // namespace

cudaError_t LaunchReduce(ReduceKind kind, const DeviceTensor& src, uint32_t reduced_dims,
                         int64_t mean_count, const DeviceTensor& dst, cudaStream_t stream) {
  if (src.f64 != dst.f64) return cudaErrorInvalidValue;
  const ReduceGeom g = MakeReduceGeom(src, reduced_dims);
  if (g.num_out != dst.size()) return cudaErrorInvalidValue;
  if (g.num_out == 0) return cudaSuccess;
  const double count = static_cast<double>(mean_count);
  return src.f64 ? EnqueueReduceKind<double>(kind, src, g, count, dst, stream)
                 : EnqueueReduceKind<float>(kind, src, g, count, dst, stream);
}

cudaError_t LaunchMax(const DeviceTensor& src, int dim, const DeviceTensor& dst,
                      cudaStream_t stream) {
  if (src.f64 != dst.f64 || dim < 0 || dim >= src.rank || src.dims[dim] < 1) {
    return cudaErrorInvalidValue;
  }
  const AxisGeom g = MakeAxisGeom(src, dim);
  if (dst.size() != g.outer * g.inner) return cudaErrorInvalidValue;
  return src.f64 ? EnqueueMax<double>(src, nullptr, g, dst.as<double>(), stream)
                 : EnqueueMax<float>(src, nullptr, g, dst.as<float>(), stream);
}

cudaError_t LaunchMaxGrad(const DeviceTensor& a, const DeviceTensor& dy, int dim,
                          const DeviceTensor& da, cudaStream_t stream) {
  if (a.f64 != dy.f64 || a.f64 != da.f64 || dim < 0 || dim >= a.rank || a.dims[dim] < 1) {
    return cudaErrorInvalidValue;
  }
  const AxisGeom g = MakeAxisGeom(a, dim);
  if (dy.size() != g.outer * g.inner || da.size() != a.size()) return cudaErrorInvalidValue;
  return a.f64 ? EnqueueMax<double>(a, dy.as<const double>(), g, da.as<double>(), stream)
               : EnqueueMax<float>(a, dy.as<const float>(), g, da.as<float>(), stream);
}

cudaError_t LaunchSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(x);
  return rows::ByType(x, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(SoftmaxKernel<T, false>, s, stream, x.as<T>(), s.rows, s.n, y.as<T>());
  });
}

cudaError_t LaunchLogSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(x);
  return rows::ByType(x, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(SoftmaxKernel<T, true>, s, stream, x.as<T>(), s.rows, s.n, y.as<T>());
  });
}

cudaError_t LaunchSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy, const DeviceTensor& dx,
                              cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(y);
  return rows::ByType(y, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(SoftmaxGradKernel<T, false>, s, stream, y.as<T>(), dy.as<T>(), s.rows,
                           s.n, dx.as<T>());
  });
}

cudaError_t LaunchLogSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy,
                                 const DeviceTensor& dx, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(y);
  return rows::ByType(y, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(SoftmaxGradKernel<T, true>, s, stream, y.as<T>(), dy.as<T>(), s.rows,
                           s.n, dx.as<T>());
  });
}

}  // namespace loom::exec::cuda
