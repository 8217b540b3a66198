// Index kernels of the CUDA backend (index_kernels.h). Each element is widened to
// double, computed with the reference kernels' formulas and stored in the element
// type. Sums and products go through the _rn intrinsics so that nvcc never contracts
// them into fused multiply-adds.

#include "exec/cuda/index_kernels.h"

#include <cstdint>

#include "exec/cuda/broadcast_kernels.h"
#include "exec/cuda/grid_stride.h"

namespace loom::exec::cuda {
namespace {

template <typename T>
__global__ void ArangeKernel(double start, double step, T* out, int64_t n) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    out[i] = static_cast<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
}

// One thread per (outer, inner) line, summing along n in order.
template <typename T>
__global__ void CumsumKernel(const T* x, T* out, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t line = grid::FirstIndex(); line < outer * inner; line += grid::Stride()) {
    const int64_t o = line / inner;
    const int64_t i = line % inner;
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = (o * n + k) * inner + i;
      acc = __dadd_rn(acc, static_cast<double>(x[at]));
      out[at] = static_cast<T>(acc);
    }
  }
}

// Up to kMaxRank index tensors, each broadcast to the positions P.
template <typename T>
struct IndexArgs {
  const T* ids[kMaxRank];
  int k = 0;
  BroadcastGeom p;                // P's dims; strides[m] unused (see id_strides)
  int64_t id_strides[kMaxRank][kMaxRank] = {};
  int64_t x_dims[kMaxRank] = {};  // x's first k dims
  int64_t x_strides[kMaxRank] = {};
  int64_t rest = 1;               // elements of x's other dims
};

template <typename T>
__global__ void IndexKernel(const T* x, T* out, int64_t n, IndexArgs<T> args,
                            unsigned long long* first_bad) {
  for (int64_t e = grid::FirstIndex(); e < n; e += grid::Stride()) {
    const int64_t p = e / args.rest;
    const int64_t r = e % args.rest;
    int64_t base = 0;
    bool ok = true;
    for (int m = 0; m < args.k; ++m) {
      int64_t at = 0;
      int64_t q = p;
      for (int d = args.p.rank - 1; d >= 0; --d) {
        at += (q % args.p.dims[d]) * args.id_strides[m][d];
        q /= args.p.dims[d];
      }
      double id = static_cast<double>(args.ids[m][at]);
      const double size = static_cast<double>(args.x_dims[m]);
      if (id < 0) id += size;
      if (!(id >= 0 && id < size) || id != floor(id)) {
        // The reference stops at the first position, then the first index tensor.
        atomicMin(first_bad, static_cast<unsigned long long>(p * args.k + m));
        ok = false;
        break;
      }
      base += static_cast<int64_t>(id) * args.x_strides[m];
    }
    out[e] = ok ? x[base + r] : static_cast<T>(0);
  }
}

template <typename T>
cudaError_t Index(const DeviceTensor& x, const DeviceTensor* ids, int k, const DeviceTensor& out,
                  cudaStream_t stream, int* bad_dim, double* bad_value) {
  *bad_dim = -1;
  IndexArgs<T> args;
  args.k = k;
  const int rest_rank = x.rank - k;
  args.p.rank = out.rank - rest_rank;
  for (int d = 0; d < args.p.rank; ++d) args.p.dims[d] = out.dims[d];
  for (int m = 0; m < k; ++m) {
    args.ids[m] = ids[m].as<const T>();
    AlignedStrides(ids[m], args.p.dims, args.p.rank, args.id_strides[m]);
    args.x_dims[m] = x.dims[m];
  }
  int64_t s = 1;
  for (int d = x.rank - 1; d >= 0; --d) {
    if (d < k) args.x_strides[d] = s;
    s *= x.dims[d];
  }
  args.rest = x.Product(k, x.rank);
  const int64_t n = out.size();
  if (n == 0 || args.rest == 0) return cudaSuccess;
  unsigned long long* first_bad = nullptr;
  cudaError_t err = cudaMallocAsync(&first_bad, sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  err = cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream);
  if (err == cudaSuccess) {
    IndexKernel<T><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        x.as<const T>(), out.as<T>(), n, args, first_bad);
    err = cudaGetLastError();
  }
  unsigned long long bad = ~0ull;
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(&bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream);
  }
  cudaFreeAsync(first_bad, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess || bad == ~0ull) return err;
  // The offending id: tensor m at position p of P.
  const int m = static_cast<int>(bad % static_cast<unsigned long long>(k));
  int64_t p = static_cast<int64_t>(bad / static_cast<unsigned long long>(k));
  int64_t at = 0;
  for (int d = args.p.rank - 1; d >= 0; --d) {
    at += (p % args.p.dims[d]) * args.id_strides[m][d];
    p /= args.p.dims[d];
  }
  T value{};
  err = cudaMemcpy(&value, ids[m].as<const T>() + at, sizeof(T), cudaMemcpyDeviceToHost);
  *bad_dim = m;
  *bad_value = static_cast<double>(value);
  return err;
}

}  // namespace

cudaError_t LaunchArange(double start, double step, const DeviceTensor& out, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  if (out.f64) {
    ArangeKernel<double>
        <<<grid::Blocks(n), grid::kThreads, 0, stream>>>(start, step, out.as<double>(), n);
  } else {
    ArangeKernel<float>
        <<<grid::Blocks(n), grid::kThreads, 0, stream>>>(start, step, out.as<float>(), n);
  }
  return cudaGetLastError();
}

cudaError_t LaunchCumsum(const DeviceTensor& x, int64_t outer, int64_t n, int64_t inner,
                         const DeviceTensor& out, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return cudaSuccess;
  if (out.f64) {
    CumsumKernel<double><<<grid::Blocks(lines), grid::kThreads, 0, stream>>>(
        x.as<const double>(), out.as<double>(), outer, n, inner);
  } else {
    CumsumKernel<float><<<grid::Blocks(lines), grid::kThreads, 0, stream>>>(
        x.as<const float>(), out.as<float>(), outer, n, inner);
  }
  return cudaGetLastError();
}

cudaError_t LaunchIndex(const DeviceTensor& x, const DeviceTensor* ids, int k,
                        const DeviceTensor& out, cudaStream_t stream, int* bad_dim,
                        double* bad_value) {
  if (k < 0 || k > x.rank || k > kMaxRank || out.rank > kMaxRank) return cudaErrorInvalidValue;
  return out.f64 ? Index<double>(x, ids, k, out, stream, bad_dim, bad_value)
                 : Index<float>(x, ids, k, out, stream, bad_dim, bad_value);
}

}  // namespace loom::exec::cuda
