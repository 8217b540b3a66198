#include "exec/cuda/cuda_ops.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace loom::exec::cuda {

absl::Status CudaError(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", static_cast<int>(err), " (",
                                          cudaGetErrorString(err), ")"));
}

absl::Status CublasError(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", static_cast<int>(err), " (",
                                          cublasGetStatusString(err), ")"));
}

absl::Status LaunchStatus(cudaError_t err, ir::OpKind kind) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string name(ir::OpKindName(kind));
  return CudaError(err, name.c_str());
}

absl::Status NotInFamily(ir::OpKind kind, const char* family) {
  return absl::UnimplementedError(
      absl::StrCat("no CUDA kernel for '", ir::OpKindName(kind), "' in the ", family, " family"));
}

absl::Status RunOp(ir::OpKind kind, const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                   absl::Span<DeviceTensor> out, const OpContext& ctx) {
  // Ranks beyond the kernels' fixed-size dims run on the host.
  for (const DeviceTensor& t : in) {
    if (t.rank > kMaxRank) {
      return absl::UnimplementedError(absl::StrCat(ir::OpKindName(kind), ": rank ", t.rank,
                                                   " exceeds the CUDA kernels' ", kMaxRank));
    }
  }
  for (const DeviceTensor& t : out) {
    if (t.rank > kMaxRank) {
      return absl::UnimplementedError(absl::StrCat(ir::OpKindName(kind), ": rank ", t.rank,
                                                   " exceeds the CUDA kernels' ", kMaxRank));
    }
  }
  using Family = absl::Status (*)(ir::OpKind, const ir::AttrMap&, absl::Span<const DeviceTensor>,
                                  absl::Span<DeviceTensor>, const OpContext&);
  for (Family family : {RunAttentionOp, RunElementwiseOp, RunIndexOp, RunLossOp, RunMatmulOp,
                         RunNormOp, RunOptimizerOp, RunPointwiseOp, RunReduceOp, RunShapeOp}) {
    absl::Status s = family(kind, attrs, in, out, ctx);
    if (!absl::IsUnimplemented(s)) return s;
  }
  return absl::UnimplementedError(
      absl::StrCat("no CUDA kernel for '", ir::OpKindName(kind), "'"));
}

}  // namespace loom::exec::cuda
