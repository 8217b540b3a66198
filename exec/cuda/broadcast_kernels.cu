// Broadcasting kernels (broadcast_kernels.h). Each element is widened to double,
// computed with the reference kernels' formulas and stored in the element type.
// Sums, products and quotients go through the _rn intrinsics so that nvcc never
// contracts them into fused multiply-adds.

#include "exec/cuda/broadcast_kernels.h"

#include <cstdint>

#include "exec/cuda/grid_stride.h"

namespace loom::exec::cuda {
namespace {

__device__ __forceinline__ int64_t SourceOf(const BroadcastGeom& g, int input, int64_t e) {
  int64_t at = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t i = e % g.dims[d];
    e /= g.dims[d];
    at += i * g.strides[input][d];
  }
  return at;
}

template <typename T>
__device__ __forceinline__ double Load(const T* p, int64_t i) {
  return static_cast<double>(p[i]);
}

template <typename T>
__global__ void BroadcastKernel(BroadcastFn fn, const T* a, const T* b, const T* c, T* out,
                                int64_t n, BroadcastGeom g) {
  for (int64_t e = grid::FirstIndex(); e < n; e += grid::Stride()) {
    const double x = Load(a, SourceOf(g, 0, e));
    const double y = Load(b, SourceOf(g, 1, e));
    double r = 0;
    switch (fn) {
      case BroadcastFn::kAdd: r = __dadd_rn(x, y); break;
      case BroadcastFn::kSub: r = __dsub_rn(x, y); break;
      case BroadcastFn::kMul: r = __dmul_rn(x, y); break;
      case BroadcastFn::kDiv: r = __ddiv_rn(x, y); break;
      case BroadcastFn::kEq: r = x == y; break;
      case BroadcastFn::kNe: r = x != y; break;
      case BroadcastFn::kLt: r = x < y; break;
      case BroadcastFn::kLe: r = x <= y; break;
      case BroadcastFn::kGt: r = x > y; break;
      case BroadcastFn::kGe: r = x >= y; break;
      case BroadcastFn::kAnd: r = x != 0 && y != 0; break;
      case BroadcastFn::kOr: r = x != 0 || y != 0; break;
      case BroadcastFn::kWhere: r = x != 0 ? y : Load(c, SourceOf(g, 2, e)); break;
    }
    out[e] = static_cast<T>(r);
  }
}

template <typename T>
cudaError_t Broadcast(BroadcastFn fn, const DeviceTensor* in, const DeviceTensor& out,
                      const BroadcastGeom& g, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  const T* c = fn == BroadcastFn::kWhere ? in[2].as<const T>() : nullptr;
  BroadcastKernel<T><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
      fn, in[0].as<const T>(), in[1].as<const T>(), c, out.as<T>(), n, g);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBroadcast(BroadcastFn fn, const DeviceTensor* inputs, int num_inputs,
                            const DeviceTensor& out, cudaStream_t stream) {
  const int needed = fn == BroadcastFn::kWhere ? 3 : 2;
  if (num_inputs != needed || out.rank > kMaxRank) return cudaErrorInvalidValue;
  BroadcastGeom g;
  g.rank = out.rank;
  for (int d = 0; d < out.rank; ++d) g.dims[d] = out.dims[d];
  for (int i = 0; i < num_inputs; ++i) {
    if (inputs[i].rank > out.rank) return cudaErrorInvalidValue;
    AlignedStrides(inputs[i], g.dims, g.rank, g.strides[i]);
  }
  return out.f64 ? Broadcast<double>(fn, inputs, out, g, stream)
                 : Broadcast<float>(fn, inputs, out, g, stream);
}

}  // namespace loom::exec::cuda
