#ifndef LOOM_EXEC_CUDA_OPTIMIZER_KERNELS_H_
#define LOOM_EXEC_CUDA_OPTIMIZER_KERNELS_H_

// Launchers of the optimizer updates (sgd, adamw) and the gradient clipping
// coefficient. Plain C++ over DeviceTensor: no Abseil, no IR, so that the kernels
// compile under nvcc alone. optimizer_ops.cc reads the attributes and calls these.
//
// Semantics are the reference kernels' (ir/ops/optimizer.cc). Every launcher
// enqueues its work on `stream` and returns the result of cudaGetLastError() after
// the last launch (cudaSuccess when there is nothing to do). All tensors of one call
// must share one element type (DeviceTensor::f64); values are computed in double and
// rounded to the element type on store, as the reference kernels compute. Nothing is
// copied to or from the host.

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/device_tensor.h"

namespace loom::exec::cuda {

// out = param - lr * (grad + weight_decay * param), elementwise.
cudaError_t LaunchSgd(const DeviceTensor& param, const DeviceTensor& grad, double lr,
                      double weight_decay, const DeviceTensor& out, cudaStream_t stream);

struct AdamWParams {
  double lr = 0.0;
  double beta1 = 0.0;
  double beta2 = 0.0;
  double eps = 0.0;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based; the bias corrections are 1 - beta^step
};

// PyTorch's AdamW, elementwise over tensors of one shape:
//   m' = beta1 m + (1 - beta1) g,  v' = beta2 v + (1 - beta2) g g,
//   param' = param - lr wd param - lr (m' / c1) / (sqrt(v' / c2) + eps),
// with c1 = 1 - beta1^step and c2 = 1 - beta2^step.
cudaError_t LaunchAdamW(const DeviceTensor& param, const DeviceTensor& grad,
                        const DeviceTensor& m, const DeviceTensor& v, const AdamWParams& p,
                        const DeviceTensor& param_out, const DeviceTensor& m_out,
                        const DeviceTensor& v_out, cudaStream_t stream);

// out[0] = min(1, max_norm / (sqrt(total_sumsq[0]) + eps)); both are 1-element
// tensors, and total_sumsq is read on the device. A NaN quotient gives 1, as
// std::min(1.0, NaN) does.
cudaError_t LaunchClipCoef(const DeviceTensor& total_sumsq, double max_norm, double eps,
                           const DeviceTensor& out, cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_OPTIMIZER_KERNELS_H_
