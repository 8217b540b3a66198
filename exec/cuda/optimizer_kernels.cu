// Kernels of the optimizer updates (see optimizer_kernels.h). Arithmetic that must
// round exactly as the reference's host code goes through the __d*_rn intrinsics,
// which nvcc never contracts into fused multiply-adds.

#include "exec/cuda/optimizer_kernels.h"

#include <cmath>
#include <cstdint>

#include "exec/cuda/strided_launch.cuh"

namespace loom::exec::cuda {
namespace {

template <typename T>
__global__ void SgdKernel(const T* param, const T* grad, double lr, double weight_decay,
                          T* out, int64_t n) {
  for (int64_t i = strided::GlobalThread(); i < n; i += strided::GridThreads()) {
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
  for (int64_t i = strided::GlobalThread(); i < n; i += strided::GridThreads()) {
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

cudaError_t LaunchSgd(const DeviceTensor& param, const DeviceTensor& grad, double lr,
                      double weight_decay, const DeviceTensor& out, cudaStream_t stream) {
  const int64_t n = param.size();
  if (param.f64 != grad.f64 || param.f64 != out.f64 || grad.size() != n || out.size() != n) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (param.f64) {
    SgdKernel<double><<<strided::BlocksFor(n), strided::kThreads, 0, stream>>>(
        param.as<const double>(), grad.as<const double>(), lr, weight_decay, out.as<double>(), n);
  } else {
    SgdKernel<float><<<strided::BlocksFor(n), strided::kThreads, 0, stream>>>(
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
    AdamWKernel<double><<<strided::BlocksFor(n), strided::kThreads, 0, stream>>>(
        param.as<const double>(), grad.as<const double>(), m.as<const double>(),
        v.as<const double>(), c, param_out.as<double>(), m_out.as<double>(), v_out.as<double>(),
        n);
  } else {
    AdamWKernel<float><<<strided::BlocksFor(n), strided::kThreads, 0, stream>>>(
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
