#ifndef LOOM_EXEC_CUDA_CUDA_OPS_H_
#define LOOM_EXEC_CUDA_CUDA_OPS_H_

// The CUDA backend's op kernels, one entry point. The op families are those of
// ir/ops/<family>.cc, and each lives in its own files: `<family>_kernels.cu` and
// `<family>_kernels.h` hold the kernels and plain launchers (no Abseil, no IR: nvcc
// sees only CUDA headers and device_tensor.h), and `<family>_ops.cc` reads the
// attributes, checks what the launchers need (op_checks.h) and calls them. Device
// code that several families share lives in files named for what it is
// (broadcast_kernels.cu, check_kernels.cu, row_kernels.cuh, rounded_arith.cuh,
// strided_launch.cuh, grid_stride.h), and so do the cuBLAS products (gemm.h).
// Semantics are exactly the reference kernels' (ir/ops/*.cc): same formulas, same
// attribute defaults, same handling of edge cases. The moe family has no CUDA
// kernels: its ops run on the host.

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
absl::Status RunAttentionOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx);
absl::Status RunElementwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                              absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                              const OpContext& ctx);
absl::Status RunIndexOp(ir::OpKind kind, const ir::AttrMap& attrs,
                        absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                        const OpContext& ctx);
absl::Status RunLossOp(ir::OpKind kind, const ir::AttrMap& attrs,
                       absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                       const OpContext& ctx);
absl::Status RunMatmulOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx);
absl::Status RunNormOp(ir::OpKind kind, const ir::AttrMap& attrs,
                       absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                       const OpContext& ctx);
absl::Status RunOptimizerOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx);
absl::Status RunPointwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx);
absl::Status RunReduceOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx);
absl::Status RunShapeOp(ir::OpKind kind, const ir::AttrMap& attrs,
                        absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                        const OpContext& ctx);

// Internal error for a failed launch or library call, naming what failed.
absl::Status CudaError(cudaError_t err, const char* what);
absl::Status CublasError(cublasStatus_t err, const char* what);
// OK for a successful launch, else CudaError naming the op.
absl::Status LaunchStatus(cudaError_t err, ir::OpKind kind);
// Unimplemented: `family` (its name, e.g. "loss") has no CUDA kernel for `kind`.
absl::Status NotInFamily(ir::OpKind kind, const char* family);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_CUDA_OPS_H_
