// Elementwise kernels of the CUDA backend. Each element is loaded, widened to
// double, computed with the reference kernels' formulas in their operation order
// and stored in the element type (one rounding in fp32 runs, as the reference
// interpreter rounds each op's result). Sums and products go through the _rn
// intrinsics so that nvcc never contracts them into fused multiply-adds, which
// the reference (ISO C++ on the host, no contraction) does not do either
// (rounded_arith.cuh).

#include "exec/cuda/elementwise_kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "exec/cuda/grid_stride.h"
#include "exec/cuda/rounded_arith.cuh"

namespace loom::exec::cuda {
namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
constexpr double kGeluA3 = 3.0 * kGeluA;  // folded as the reference's 3.0 * kGeluA * x * x

// 0.5 x (1 + tanh(c (x + a x^3))).
__device__ double Gelu(double x) {
  const double cube = rn::Mul(rn::Mul(rn::Mul(kGeluA, x), x), x);
  const double t = tanh(rn::Mul(kGeluC, rn::Add(x, cube)));
  return rn::Mul(rn::Mul(0.5, x), rn::Add(1.0, t));
}

// d/dx of Gelu: 0.5 (1 + t) + 0.5 x (1 - t^2) du.
__device__ double GeluDerivative(double x) {
  const double u = rn::Mul(kGeluC, rn::Add(x, rn::Mul(rn::Mul(rn::Mul(kGeluA, x), x), x)));
  const double t = tanh(u);
  const double du = rn::Mul(kGeluC, rn::Add(1.0, rn::Mul(rn::Mul(kGeluA3, x), x)));
  return rn::Add(rn::Mul(0.5, rn::Add(1.0, t)),
                 rn::Mul(rn::Mul(rn::Mul(0.5, x), rn::Sub(1.0, rn::Mul(t, t))), du));
}

constexpr double kSqrtHalf = 0.7071067811865476;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

// The exact gelu 0.5 x (1 + erf(x / sqrt 2)) and its derivative
// 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
__device__ double GeluExact(double x) {
  return rn::Mul(rn::Mul(0.5, x), rn::Add(1.0, erf(rn::Mul(x, kSqrtHalf))));
}
__device__ double GeluExactDerivative(double x) {
  const double cdf = rn::Mul(0.5, rn::Add(1.0, erf(rn::Mul(x, kSqrtHalf))));
  return rn::Add(cdf, rn::Mul(rn::Mul(x, exp(rn::Mul(rn::Mul(-0.5, x), x))), kInvSqrt2Pi));
}

__device__ double Sigmoid(double x) { return rn::Div(1.0, rn::Add(1.0, exp(-x))); }
__device__ double Silu(double x) { return rn::Mul(x, Sigmoid(x)); }
// s (1 + x (1 - s)) with s = sigmoid(x).
__device__ double SiluDerivative(double x) {
  const double s = Sigmoid(x);
  return rn::Mul(s, rn::Add(1.0, rn::Mul(x, rn::Sub(1.0, s))));
}

// ---- element functions ---------------------------------------------------------

struct NegFn {
  __device__ double operator()(double x) const { return -x; }
};
struct ExpFn {
  __device__ double operator()(double x) const { return exp(x); }
};
struct LogFn {
  __device__ double operator()(double x) const { return log(x); }
};
struct RsqrtFn {
  __device__ double operator()(double x) const { return rn::Div(1.0, __dsqrt_rn(x)); }
};
struct GeluFn {
  __device__ double operator()(double x) const { return Gelu(x); }
};
struct GeluExactFn {
  __device__ double operator()(double x) const { return GeluExact(x); }
};
struct SiluFn {
  __device__ double operator()(double x) const { return Silu(x); }
};
struct IdentityFn {
  __device__ double operator()(double x) const { return x; }
};
struct ScaleFn {
  double factor;
  __device__ double operator()(double x) const { return rn::Mul(x, factor); }
};
struct PowFn {
  double exponent;
  __device__ double operator()(double x) const { return pow(x, exponent); }
};

struct AddFn {
  __device__ double operator()(double a, double b) const { return rn::Add(a, b); }
};
struct SubFn {
  __device__ double operator()(double a, double b) const { return rn::Sub(a, b); }
};
struct MulFn {
  __device__ double operator()(double a, double b) const { return rn::Mul(a, b); }
};
struct GeluGradFn {
  __device__ double operator()(double x, double dy) const {
    return rn::Mul(dy, GeluDerivative(x));
  }
};
struct GeluExactGradFn {
  __device__ double operator()(double x, double dy) const {
    return rn::Mul(dy, GeluExactDerivative(x));
  }
};
struct SiluGradFn {
  __device__ double operator()(double x, double dy) const {
    return rn::Mul(dy, SiluDerivative(x));
  }
};
struct SwiGluFn {
  __device__ double operator()(double gate, double up) const { return rn::Mul(Silu(gate), up); }
};

// ---- kernels -------------------------------------------------------------------

template <typename T, typename F>
__global__ void Map1Kernel(const T* x, T* out, int64_t n, F f) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    out[i] = static_cast<T>(f(static_cast<double>(x[i])));
  }
}

template <typename T, typename F>
__global__ void Map2Kernel(const T* a, const T* b, T* out, int64_t n, F f) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    out[i] = static_cast<T>(f(static_cast<double>(a[i]), static_cast<double>(b[i])));
  }
}

// x * s or x / s with the scalar read from device memory.
template <typename T, bool kDivide>
__global__ void TensorScalarKernel(const T* x, const T* s, T* out, int64_t n) {
  const double scalar = static_cast<double>(*s);
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    const double v = static_cast<double>(x[i]);
    out[i] = static_cast<T>(kDivide ? rn::Div(v, scalar) : rn::Mul(v, scalar));
  }
}

template <typename T>
__global__ void SwiGluGradKernel(const T* gate, const T* up, const T* dy, T* dgate, T* dup,
                                 int64_t n) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    const double g = static_cast<double>(gate[i]);
    const double u = static_cast<double>(up[i]);
    const double d = static_cast<double>(dy[i]);
    dgate[i] = static_cast<T>(rn::Mul(rn::Mul(d, u), SiluDerivative(g)));
    dup[i] = static_cast<T>(rn::Mul(d, Silu(g)));
  }
}

template <typename T>
__global__ void FillKernel(T* out, int64_t n, T value) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) out[i] = value;
}

// Inputs summed by one accumulate launch, passed by value as a kernel parameter.
constexpr int kAccumulateChunk = 64;

template <typename T>
struct InputChunk {
  const T* data[kAccumulateChunk];
  int count;
};

// Adds the chunk's inputs, in order, to a running double sum that starts at 0
// when `partial_in` is null and at partial_in[i] otherwise. The sum goes to
// partial_out[i] when `partial_out` is set and is rounded into out[i] otherwise.
// partial_in may alias partial_out, or (for double) out.
template <typename T>
__global__ void AccumulateKernel(InputChunk<T> chunk, const double* partial_in, double* partial_out,
                                 T* out, int64_t n) {
  for (int64_t i = grid::FirstIndex(); i < n; i += grid::Stride()) {
    double sum = partial_in != nullptr ? partial_in[i] : 0.0;
    for (int k = 0; k < chunk.count; ++k) {
      sum = rn::Add(sum, static_cast<double>(chunk.data[k][i]));
    }
    if (partial_out != nullptr) {
      partial_out[i] = sum;
    } else {
      out[i] = static_cast<T>(sum);
    }
  }
}

// ---- typed launchers -----------------------------------------------------------

template <typename T, typename F>
cudaError_t Map1(const DeviceTensor& x, const DeviceTensor& out, F f, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  Map1Kernel<T, F>
      <<<grid::Blocks(n), grid::kThreads, 0, stream>>>(x.as<const T>(), out.as<T>(), n, f);
  return cudaGetLastError();
}

template <typename F>
cudaError_t DispatchMap1(const DeviceTensor& x, const DeviceTensor& out, F f, cudaStream_t stream) {
  return out.f64 ? Map1<double>(x, out, f, stream) : Map1<float>(x, out, f, stream);
}

template <typename T, typename F>
cudaError_t Map2(const DeviceTensor& a, const DeviceTensor& b, const DeviceTensor& out, F f,
                 cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  Map2Kernel<T, F><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
      a.as<const T>(), b.as<const T>(), out.as<T>(), n, f);
  return cudaGetLastError();
}

template <typename F>
cudaError_t DispatchMap2(const DeviceTensor& a, const DeviceTensor& b, const DeviceTensor& out, F f,
                         cudaStream_t stream) {
  return out.f64 ? Map2<double>(a, b, out, f, stream) : Map2<float>(a, b, out, f, stream);
}

template <typename T>
cudaError_t TensorScalar(ScalarFn fn, const DeviceTensor& x, const DeviceTensor& s,
                         const DeviceTensor& out, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  if (fn == ScalarFn::kDiv) {
    TensorScalarKernel<T, true><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        x.as<const T>(), s.as<const T>(), out.as<T>(), n);
  } else {
    TensorScalarKernel<T, false><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        x.as<const T>(), s.as<const T>(), out.as<T>(), n);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t SwiGluGrad(const DeviceTensor& gate, const DeviceTensor& up, const DeviceTensor& dy,
                       const DeviceTensor& dgate, const DeviceTensor& dup, cudaStream_t stream) {
  const int64_t n = gate.size();
  if (n == 0) return cudaSuccess;
  SwiGluGradKernel<T><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
      gate.as<const T>(), up.as<const T>(), dy.as<const T>(), dgate.as<T>(), dup.as<T>(), n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Fill(const DeviceTensor& out, double value, cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  FillKernel<T>
      <<<grid::Blocks(n), grid::kThreads, 0, stream>>>(out.as<T>(), n, static_cast<T>(value));
  return cudaGetLastError();
}

// Sums the inputs chunk by chunk. Between chunks the running sum stays in
// double: in `out` itself for double, in a scratch buffer for float (needed only
// when the inputs do not fit one chunk), so the result is rounded exactly once.
template <typename T>
cudaError_t Accumulate(const DeviceTensor* inputs, int num_inputs, const DeviceTensor& out,
                       cudaStream_t stream) {
  const int64_t n = out.size();
  if (n == 0) return cudaSuccess;
  if (num_inputs <= 0) return cudaErrorInvalidValue;
  double* partial = nullptr;
  bool scratch = false;
  if constexpr (std::is_same_v<T, double>) {
    partial = out.as<double>();
  } else if (num_inputs > kAccumulateChunk) {
    cudaError_t err =
        cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(double) * n, stream);
    if (err != cudaSuccess) return err;
    scratch = true;
  }
  cudaError_t err = cudaSuccess;
  for (int first = 0; first < num_inputs && err == cudaSuccess; first += kAccumulateChunk) {
    InputChunk<T> chunk{};
    chunk.count = std::min(kAccumulateChunk, num_inputs - first);
    for (int k = 0; k < chunk.count; ++k) chunk.data[k] = inputs[first + k].as<const T>();
    const bool last = first + chunk.count >= num_inputs;
    const double* partial_in = first == 0 ? nullptr : partial;
    // Double results land in `out` either way; float ones stay in the scratch
    // buffer until the last chunk.
    double* partial_out = (last || !scratch) ? nullptr : partial;
    AccumulateKernel<T><<<grid::Blocks(n), grid::kThreads, 0, stream>>>(
        chunk, partial_in, partial_out, out.as<T>(), n);
    err = cudaGetLastError();
  }
  if (scratch) {
    cudaError_t free_err = cudaFreeAsync(partial, stream);
    if (err == cudaSuccess) err = free_err;
  }
  return err;
}

}  // namespace

cudaError_t LaunchUnary(UnaryFn fn, const DeviceTensor& x, const DeviceTensor& out,
                        cudaStream_t stream) {
  switch (fn) {
    case UnaryFn::kNeg:
      return DispatchMap1(x, out, NegFn{}, stream);
    case UnaryFn::kExp:
      return DispatchMap1(x, out, ExpFn{}, stream);
    case UnaryFn::kLog:
      return DispatchMap1(x, out, LogFn{}, stream);
    case UnaryFn::kRsqrt:
      return DispatchMap1(x, out, RsqrtFn{}, stream);
    case UnaryFn::kGelu:
      return DispatchMap1(x, out, GeluFn{}, stream);
    case UnaryFn::kGeluExact:
      return DispatchMap1(x, out, GeluExactFn{}, stream);
    case UnaryFn::kSilu:
      return DispatchMap1(x, out, SiluFn{}, stream);
    case UnaryFn::kIdentity:
      return DispatchMap1(x, out, IdentityFn{}, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchBinary(BinaryFn fn, const DeviceTensor& a, const DeviceTensor& b,
                         const DeviceTensor& out, cudaStream_t stream) {
  switch (fn) {
    case BinaryFn::kAdd:
      return DispatchMap2(a, b, out, AddFn{}, stream);
    case BinaryFn::kSub:
      return DispatchMap2(a, b, out, SubFn{}, stream);
    case BinaryFn::kMul:
      return DispatchMap2(a, b, out, MulFn{}, stream);
    case BinaryFn::kGeluGrad:
      return DispatchMap2(a, b, out, GeluGradFn{}, stream);
    case BinaryFn::kGeluExactGrad:
      return DispatchMap2(a, b, out, GeluExactGradFn{}, stream);
    case BinaryFn::kSiluGrad:
      return DispatchMap2(a, b, out, SiluGradFn{}, stream);
    case BinaryFn::kSwiGlu:
      return DispatchMap2(a, b, out, SwiGluFn{}, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchScale(const DeviceTensor& x, double factor, const DeviceTensor& out,
                        cudaStream_t stream) {
  return DispatchMap1(x, out, ScaleFn{factor}, stream);
}

cudaError_t LaunchPow(const DeviceTensor& x, double exponent, const DeviceTensor& out,
                      cudaStream_t stream) {
  return DispatchMap1(x, out, PowFn{exponent}, stream);
}

cudaError_t LaunchTensorScalar(ScalarFn fn, const DeviceTensor& x, const DeviceTensor& s,
                               const DeviceTensor& out, cudaStream_t stream) {
  return out.f64 ? TensorScalar<double>(fn, x, s, out, stream)
                 : TensorScalar<float>(fn, x, s, out, stream);
}

cudaError_t LaunchAccumulate(const DeviceTensor* inputs, int num_inputs, const DeviceTensor& out,
                             cudaStream_t stream) {
  return out.f64 ? Accumulate<double>(inputs, num_inputs, out, stream)
                 : Accumulate<float>(inputs, num_inputs, out, stream);
}

cudaError_t LaunchSwiGluGrad(const DeviceTensor& gate, const DeviceTensor& up,
                             const DeviceTensor& dy, const DeviceTensor& dgate,
                             const DeviceTensor& dup, cudaStream_t stream) {
  return gate.f64 ? SwiGluGrad<double>(gate, up, dy, dgate, dup, stream)
                  : SwiGluGrad<float>(gate, up, dy, dgate, dup, stream);
}

cudaError_t LaunchFill(const DeviceTensor& out, double value, cudaStream_t stream) {
  return out.f64 ? Fill<double>(out, value, stream) : Fill<float>(out, value, stream);
}

}  // namespace loom::exec::cuda
