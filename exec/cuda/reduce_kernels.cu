// Kernels of the reductions, shape ops and optimizer updates (see
// reduce_shape_kernels.h). Arithmetic that must round exactly as the reference's
// host code goes through the __d*_rn intrinsics, which nvcc never contracts into
// fused multiply-adds.

#include "exec/cuda/reduce_shape_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom::exec::cuda {
namespace {

constexpr int kThreads = 256;          // threads per block, a power of two
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest
// Reductions at least this long over the innermost dim use a block per output.
constexpr int64_t kBlockReduceMin = 4096;

int BlocksFor(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Row-major strides of `t`.
void RowMajorStrides(const DeviceTensor& t, int64_t* strides) {
  int64_t s = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= t.dims[d];
  }
}

// ---- strided copy ------------------------------------------------------------------

// Element i of a box of `extent` (row-major) is copied from
// src[src_base + sum c_d src_stride[d]] to dst[dst_base + sum c_d dst_stride[d]],
// c the box coordinates of i.
struct CopyGeom {
  int rank = 0;
  int64_t count = 1;
  int64_t src_base = 0;
  int64_t dst_base = 0;
  int64_t extent[kMaxRank] = {};
  int64_t src_stride[kMaxRank] = {};
  int64_t dst_stride[kMaxRank] = {};
};

// The geometry of a box copy with extent-1 dims dropped and neighbouring dims
// merged where both sides step through them as one dim. `count` must be > 0.
CopyGeom MakeCopyGeom(int rank, const int64_t* extent, const int64_t* src_stride,
                      const int64_t* dst_stride, int64_t src_base, int64_t dst_base) {
  CopyGeom g;
  g.src_base = src_base;
  g.dst_base = dst_base;
  for (int d = 0; d < rank; ++d) {
    g.count *= extent[d];
    if (extent[d] == 1) continue;
    if (g.rank > 0) {
      const int last = g.rank - 1;
      if (g.src_stride[last] == src_stride[d] * extent[d] &&
          g.dst_stride[last] == dst_stride[d] * extent[d]) {
        g.extent[last] *= extent[d];
        g.src_stride[last] = src_stride[d];
        g.dst_stride[last] = dst_stride[d];
        continue;
      }
    }
    g.extent[g.rank] = extent[d];
    g.src_stride[g.rank] = src_stride[d];
    g.dst_stride[g.rank] = dst_stride[d];
    ++g.rank;
  }
  return g;
}

template <typename T>
__global__ void StridedCopyKernel(const T* src, T* dst, CopyGeom g) {
  for (int64_t i = GlobalThread(); i < g.count; i += GridThreads()) {
    int64_t rest = i;
    int64_t s = g.src_base;
    int64_t d = g.dst_base;
    for (int k = g.rank - 1; k >= 0; --k) {
      const int64_t c = rest % g.extent[k];
      rest /= g.extent[k];
      s += c * g.src_stride[k];
      d += c * g.dst_stride[k];
    }
    dst[d] = src[s];
  }
}

cudaError_t EnqueueCopy(bool f64, const void* src, void* dst, const CopyGeom& g,
                        cudaStream_t stream) {
  if (g.count == 0) return cudaSuccess;
  if (f64) {
    StridedCopyKernel<double><<<BlocksFor(g.count), kThreads, 0, stream>>>(
        static_cast<const double*>(src), static_cast<double*>(dst), g);
  } else {
    StridedCopyKernel<float><<<BlocksFor(g.count), kThreads, 0, stream>>>(
        static_cast<const float*>(src), static_cast<float*>(dst), g);
  }
  return cudaGetLastError();
}

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
  RowMajorStrides(src, strides);
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
  for (int64_t o = GlobalThread(); o < g.num_out; o += GridThreads()) {
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
  __shared__ double partial[kThreads];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < g.num_out; o += gridDim.x) {
    const int64_t base = KeptOffset(g, o);
    double sum = 0.0;
    for (int64_t r = t; r < g.count; r += kThreads) {
      sum = Accumulate<K>(sum, static_cast<double>(src[base + ReducedOffset(g, r)]));
    }
    partial[t] = sum;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
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
    const int blocks = static_cast<int>(std::min<int64_t>(g.num_out, kMaxBlocks));
    ReduceBlockKernel<T, K><<<blocks, kThreads, 0, stream>>>(src.as<const T>(), dst.as<T>(),
                                                             g, count);
  } else {
    ReduceThreadKernel<T, K><<<BlocksFor(g.num_out), kThreads, 0, stream>>>(
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
  __shared__ T values[kThreads];
  __shared__ int64_t positions[kThreads];
  const int t = threadIdx.x;
  T best_value = T(0);
  int64_t best = -1;  // none yet
  for (int64_t k = t; k < n; k += kThreads) {
    const T x = a[base + k];
    if (x == x && (best < 0 || x > best_value)) {
      best_value = x;
      best = k;
    }
  }
  values[t] = best_value;
  positions[t] = best;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
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
  for (int64_t j = GlobalThread(); j < total; j += GridThreads()) {
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
    const int blocks = static_cast<int>(std::min<int64_t>(g.outer, kMaxBlocks));
    MaxBlockKernel<T><<<blocks, kThreads, 0, stream>>>(a.as<const T>(), dy, out, g);
  } else {
    MaxThreadKernel<T><<<BlocksFor(g.outer * g.inner), kThreads, 0, stream>>>(
        a.as<const T>(), dy, out, g);
  }
  return cudaGetLastError();
}

// ---- optimizer updates --------------------------------------------------------------------

template <typename T>
__global__ void SgdKernel(const T* param, const T* grad, double lr, double weight_decay,
                          T* out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const double p = static_cast<double>(param[i]);
    const double g = static_cast<double>(grad[i]);
    out[i] = static_cast<T>(__dsub_rn(p, __dmul_rn(lr, __dadd_rn(g, __dmul_rn(weight_decay, p)))));
  }
}

// AdamWParams with the per-step constants folded as the reference folds them.
struct AdamWConstants {
  double lr;
  double beta1;
  double beta2;
  double one_minus_beta1;
  double one_minus_beta2;
  double lr_weight_decay;  // lr * weight_decay
  double correction1;      // 1 - beta1^step
  double correction2;      // 1 - beta2^step
  double eps;
};

template <typename T>
__global__ void AdamWKernel(const T* param, const T* grad, const T* m, const T* v,
                            AdamWConstants c, T* param_out, T* m_out, T* v_out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const double p = static_cast<double>(param[i]);
    const double g = static_cast<double>(grad[i]);
    const double m_new =
        __dadd_rn(__dmul_rn(c.beta1, static_cast<double>(m[i])), __dmul_rn(c.one_minus_beta1, g));
    const double v_new = __dadd_rn(__dmul_rn(c.beta2, static_cast<double>(v[i])),
                                   __dmul_rn(__dmul_rn(c.one_minus_beta2, g), g));
    const double m_hat = __ddiv_rn(m_new, c.correction1);
    const double v_hat = __ddiv_rn(v_new, c.correction2);
    const double decayed = __dsub_rn(p, __dmul_rn(c.lr_weight_decay, p));
    const double step =
        __ddiv_rn(__dmul_rn(c.lr, m_hat), __dadd_rn(__dsqrt_rn(v_hat), c.eps));
    param_out[i] = static_cast<T>(__dsub_rn(decayed, step));
    m_out[i] = static_cast<T>(m_new);
    v_out[i] = static_cast<T>(v_new);
  }
}

template <typename T>
__global__ void ClipCoefKernel(const T* total_sumsq, double max_norm, double eps, T* out) {
  const double norm = __dsqrt_rn(static_cast<double>(total_sumsq[0]));
  const double q = __ddiv_rn(max_norm, __dadd_rn(norm, eps));
  out[0] = static_cast<T>(q < 1.0 ? q : 1.0);  // std::min(1.0, q)
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------

cudaError_t LaunchFlatCopy(const DeviceTensor& src, const DeviceTensor& dst,
                           cudaStream_t stream) {
  const int64_t n = dst.size();
  if (src.f64 != dst.f64 || src.size() != n) return cudaErrorInvalidValue;
  if (n == 0 || src.data == dst.data) return cudaSuccess;
  const size_t bytes = static_cast<size_t>(n) * (dst.f64 ? sizeof(double) : sizeof(float));
  cudaError_t err = cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, stream);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

cudaError_t LaunchCopyBox(const DeviceTensor& src, const RankArray& src_origin,
                          const DeviceTensor& dst, const RankArray& dst_origin,
                          const RankArray& extent, cudaStream_t stream) {
  if (src.f64 != dst.f64 || src.rank != dst.rank) return cudaErrorInvalidValue;
  const int rank = src.rank;
  int64_t src_strides[kMaxRank];
  int64_t dst_strides[kMaxRank];
  RowMajorStrides(src, src_strides);
  RowMajorStrides(dst, dst_strides);
  int64_t src_base = 0;
  int64_t dst_base = 0;
  for (int d = 0; d < rank; ++d) {
    if (extent.v[d] == 0) return cudaSuccess;
    if (src.dims[d] == 1) {
      src_strides[d] = 0;  // broadcast
    } else {
      src_base += src_origin.v[d] * src_strides[d];
    }
    dst_base += dst_origin.v[d] * dst_strides[d];
  }
  CopyGeom g = MakeCopyGeom(rank, extent.v, src_strides, dst_strides, src_base, dst_base);
  return EnqueueCopy(dst.f64, src.data, dst.data, g, stream);
}

cudaError_t LaunchTranspose(const DeviceTensor& src, const RankArray& perm,
                            const DeviceTensor& dst, cudaStream_t stream) {
  if (src.f64 != dst.f64 || src.rank != dst.rank) return cudaErrorInvalidValue;
  const int rank = src.rank;
  int64_t src_strides[kMaxRank];
  int64_t dst_strides[kMaxRank];
  int64_t gathered[kMaxRank] = {};
  RowMajorStrides(src, src_strides);
  RowMajorStrides(dst, dst_strides);
  for (int i = 0; i < rank; ++i) {
    const int64_t p = perm.v[i];
    if (p < 0 || p >= rank || src.dims[p] != dst.dims[i]) return cudaErrorInvalidValue;
    gathered[i] = src_strides[p];
  }
  if (dst.size() == 0) return cudaSuccess;
  CopyGeom g = MakeCopyGeom(rank, dst.dims, gathered, dst_strides, 0, 0);
  return EnqueueCopy(dst.f64, src.data, dst.data, g, stream);
}

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

cudaError_t LaunchSgd(const DeviceTensor& param, const DeviceTensor& grad, double lr,
                      double weight_decay, const DeviceTensor& out, cudaStream_t stream) {
  const int64_t n = param.size();
  if (param.f64 != grad.f64 || param.f64 != out.f64 || grad.size() != n || out.size() != n) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (param.f64) {
    SgdKernel<double><<<BlocksFor(n), kThreads, 0, stream>>>(
        param.as<const double>(), grad.as<const double>(), lr, weight_decay, out.as<double>(), n);
  } else {
    SgdKernel<float><<<BlocksFor(n), kThreads, 0, stream>>>(
        param.as<const float>(), grad.as<const float>(), lr, weight_decay, out.as<float>(), n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchAdamW(const DeviceTensor& param, const DeviceTensor& grad,
                        const DeviceTensor& m, const DeviceTensor& v, const AdamWParams& p,
                        const DeviceTensor& param_out, const DeviceTensor& m_out,
                        const DeviceTensor& v_out, cudaStream_t stream) {
  const int64_t n = param.size();
  for (const DeviceTensor* t : {&grad, &m, &v, &param_out, &m_out, &v_out}) {
    if (t->f64 != param.f64 || t->size() != n) return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const double step = static_cast<double>(p.step);
  AdamWConstants c;
  c.lr = p.lr;
  c.beta1 = p.beta1;
  c.beta2 = p.beta2;
  c.one_minus_beta1 = 1.0 - p.beta1;
  c.one_minus_beta2 = 1.0 - p.beta2;
  c.lr_weight_decay = p.lr * p.weight_decay;
  c.correction1 = 1.0 - std::pow(p.beta1, step);
  c.correction2 = 1.0 - std::pow(p.beta2, step);
  c.eps = p.eps;
  if (param.f64) {
    AdamWKernel<double><<<BlocksFor(n), kThreads, 0, stream>>>(
        param.as<const double>(), grad.as<const double>(), m.as<const double>(),
        v.as<const double>(), c, param_out.as<double>(), m_out.as<double>(), v_out.as<double>(),
        n);
  } else {
    AdamWKernel<float><<<BlocksFor(n), kThreads, 0, stream>>>(
        param.as<const float>(), grad.as<const float>(), m.as<const float>(),
        v.as<const float>(), c, param_out.as<float>(), m_out.as<float>(), v_out.as<float>(), n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchClipCoef(const DeviceTensor& total_sumsq, double max_norm, double eps,
                           const DeviceTensor& out, cudaStream_t stream) {
  if (total_sumsq.f64 != out.f64 || total_sumsq.size() != 1 || out.size() != 1) {
    return cudaErrorInvalidValue;
  }
  if (out.f64) {
    ClipCoefKernel<double><<<1, 1, 0, stream>>>(total_sumsq.as<const double>(), max_norm, eps,
                                                out.as<double>());
  } else {
    ClipCoefKernel<float><<<1, 1, 0, stream>>>(total_sumsq.as<const float>(), max_norm, eps,
                                               out.as<float>());
  }
  return cudaGetLastError();
}

}  // namespace loom::exec::cuda
