#ifndef LOOM_EXEC_CUDA_NORM_KERNELS_H_
#define LOOM_EXEC_CUDA_NORM_KERNELS_H_

// Launchers of the normalisations and their gradients, over rows of the last dim.
// The formulas, attribute meanings and edge cases are the reference kernels'
// (ir/ops/norm.cc). Kept free of Abseil and of the IR so that nvcc only sees CUDA
// headers.
//
// The launchers follow the row-wise contracts of row_kernels.cuh: one element type
// per call, outputs arrive zero-filled, work goes on `stream` unsynchronised, sums in
// double rounded once on store and reduced in a fixed order, and the result is the
// first failing launch or scratch allocation (cudaSuccess otherwise).

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// y = x / sqrt(mean(x^2) + eps) * gamma over the last dim. x, y [..., d]; gamma [d].
cudaError_t LaunchRmsNorm(const DeviceTensor& x, const DeviceTensor& gamma, double eps,
                          const DeviceTensor& y, cudaStream_t stream);

// With xhat = x * rstd and g = dy * gamma: dx = rstd * (g - xhat * mean(g * xhat)),
// dgamma = sum over rows of dy * xhat. x, dy, dx [..., d]; gamma, dgamma [d].
cudaError_t LaunchRmsNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                              const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                              const DeviceTensor& dgamma, cudaStream_t stream);

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim (biased variance).
cudaError_t LaunchLayerNorm(const DeviceTensor& x, const DeviceTensor& gamma,
                            const DeviceTensor& beta, double eps, const DeviceTensor& y,
                            cudaStream_t stream);

// With xhat the normalised row and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum dy * xhat,
// dbeta = sum dy (sums over rows).
cudaError_t LaunchLayerNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                                const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                                const DeviceTensor& dgamma, const DeviceTensor& dbeta,
                                cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_NORM_KERNELS_H_
