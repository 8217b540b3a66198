// The matrix-product family on the GPU: linear, linear_wgrad and matmul as cuBLAS
// products (gemm.h), and the embedding lookup with its gradient. Exactly the
// reference's semantics and attributes (ir/ops/matmul.cc); the kernels live in
// matmul_kernels.cu.
//
// The reference rejects an id that is not a valid table row; so do embedding and
// embedding_grad, which check the ids before they launch.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/matmul_kernels.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/vocab.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

absl::Status Linear(absl::Span<const DeviceTensor> in, DeviceTensor& y, const OpContext& ctx) {
  const DeviceTensor& x = in[0];
  const DeviceTensor& w = in[1];
  const int64_t rows = x.Product(0, x.rank - 1);
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  if (absl::Status s = Gemm(ctx, x.f64, false, true, rows, n_out, n_in, 1.0, x.data, n_in, 0,
                            w.data, n_in, 0, 0.0, y.data, n_out, 0);
      !s.ok()) {
    return s;
  }
  if (in.size() == 3) {
    return CudaError(LaunchAddBias(y.data, in[2].data, rows, n_out, y.f64, ctx.stream), "linear");
  }
  return absl::OkStatus();
}

absl::Status LinearWGrad(absl::Span<const DeviceTensor> in, DeviceTensor& dw,
                         const OpContext& ctx) {
  const DeviceTensor& dy = in[0];
  const DeviceTensor& x = in[1];
  const int64_t rows = dy.Product(0, dy.rank - 1);
  const int64_t n_out = dy.dim(dy.rank - 1), n_in = x.dim(x.rank - 1);
  return Gemm(ctx, dy.f64, true, false, n_out, n_in, rows, 1.0, dy.data, n_out, 0, x.data, n_in, 0,
              0.0, dw.data, n_in, 0);
}

absl::Status MatMul(absl::Span<const DeviceTensor> in, DeviceTensor& y, const OpContext& ctx) {
  const DeviceTensor& a = in[0];
  const DeviceTensor& b = in[1];
  const int64_t batch = a.Product(0, a.rank - 2);
  const int64_t m = a.dim(a.rank - 2), k = a.dim(a.rank - 1), n = b.dim(b.rank - 1);
  const bool b_batched = b.rank > 2;
  return Gemm(ctx, a.f64, false, false, m, n, k, 1.0, a.data, k, m * k, b.data, n,
              b_batched ? k * n : 0, 0.0, y.data, n, m * n, batch);
}

}  // namespace

absl::Status RunMatmulOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx) {
  cudaStream_t stream = ctx.stream;
  switch (kind) {
    case OpKind::kLinear:
      return Linear(in, out[0], ctx);
    case OpKind::kLinearWGrad:
      return LinearWGrad(in, out[0], ctx);
    case OpKind::kMatMul:
      return MatMul(in, out[0], ctx);
    case OpKind::kEmbedding: {  // (ids, table) -> out
      LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      LOOM_RETURN_IF_ERROR(
          CheckIndices(in[0], begin == kNoVocabBegin ? in[1].dim(0) : 0, "id", stream));
      return LaunchStatus(LaunchEmbedding(in[0], in[1], begin, out[0], stream), kind);
    }
    case OpKind::kEmbeddingGrad: {  // (ids, dy) -> dtable [vocab, d]
      LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      LOOM_RETURN_IF_ERROR(CheckVocab(attrs, out[0], 0));
      LOOM_RETURN_IF_ERROR(
          CheckIndices(in[0], begin == kNoVocabBegin ? out[0].dim(0) : 0, "id", stream));
      return LaunchStatus(LaunchEmbeddingGrad(in[0], in[1], begin, out[0], stream), kind);
    }
    default:
      return NotInFamily(kind, "matmul");
  }
}

}  // namespace loom::exec::cuda
