#ifndef LOOM_EXEC_CUDA_CUDA_OPS_H_
#define LOOM_EXEC_CUDA_CUDA_OPS_H_

// The CUDA backend's op kernels, one entry point. Each op family lives in its
// own pair of files: `<family>_kernels.cu` holds the kernels and plain launchers
// (no Abseil, no IR: nvcc sees only CUDA headers and device_tensor.h), and
// `<family>_ops.cc` reads the attributes, checks what the launchers need and
// calls them. Semantics are exactly the reference kernels' (ir/ops/*.cc):
// same formulas, same attribute defaults, same handling of edge cases.

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "exec/cuda/device_tensor.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"

namespace loom::exec::cuda {

struct OpContext {
  cudaStream_t stream = nullptr;    // every launch goes on it
  cublasHandle_t blas = nullptr;    // bound to `stream`
};

// Runs `kind` on `in`; `out` arrives allocated with the inferred output shapes
// and zero-filled (kernels that accumulate may rely on it). Unimplemented when no
// family has a CUDA kernel for the kind: the backend then runs the reference
// kernel on the host. Launch errors come back as Internal.
absl::Status RunOp(ir::OpKind kind, const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                   absl::Span<DeviceTensor> out, const OpContext& ctx);

// The families. Each returns Unimplemented for a kind it does not own.
absl::Status RunElementwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                              absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                              const OpContext& ctx);
absl::Status RunPointwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx);
absl::Status RunRowwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                          absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                          const OpContext& ctx);
absl::Status RunReduceShapeOp(ir::OpKind kind, const ir::AttrMap& attrs,
                              absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                              const OpContext& ctx);
absl::Status RunMatmulOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx);

// Internal error for a failed launch or library call, naming what failed.
absl::Status CudaError(cudaError_t err, const char* what);
absl::Status CublasError(cublasStatus_t err, const char* what);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_CUDA_OPS_H_
