// Kernels of the shape ops (see shape_kernels.h): one strided copy, with its
// geometry simplified before launch, serves every box copy and transpose.

#include "exec/cuda/shape_kernels.h"

#include <cstdint>

#include "exec/cuda/strided_launch.cuh"

namespace loom::exec::cuda {
namespace {

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
  for (int64_t i = strided::GlobalThread(); i < g.count; i += strided::GridThreads()) {
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
    StridedCopyKernel<double><<<strided::BlocksFor(g.count), strided::kThreads, 0, stream>>>(
        static_cast<const double*>(src), static_cast<double*>(dst), g);
  } else {
    StridedCopyKernel<float><<<strided::BlocksFor(g.count), strided::kThreads, 0, stream>>>(
        static_cast<const float*>(src), static_cast<float*>(dst), g);
  }
  return cudaGetLastError();
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
  strided::RowMajorStrides(src, src_strides);
  strided::RowMajorStrides(dst, dst_strides);
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
  strided::RowMajorStrides(src, src_strides);
  strided::RowMajorStrides(dst, dst_strides);
  for (int i = 0; i < rank; ++i) {
    const int64_t p = perm.v[i];
    if (p < 0 || p >= rank || src.dims[p] != dst.dims[i]) return cudaErrorInvalidValue;
    gathered[i] = src_strides[p];
  }
  if (dst.size() == 0) return cudaSuccess;
  CopyGeom g = MakeCopyGeom(rank, dst.dims, gathered, dst_strides, 0, 0);
  return EnqueueCopy(dst.f64, src.data, dst.data, g, stream);
}

}  // namespace loom::exec::cuda
