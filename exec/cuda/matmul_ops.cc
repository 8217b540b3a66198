// The matrix-product family on the GPU: linear, linear_wgrad and matmul as
// cuBLAS products, attention and its gradient as cuBLAS products per batch and
// key/value head around a masked softmax (exactly the reference's semantics,
// ir/ops/matmul.cc and ir/ops/attention.cc).

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/matmul_kernels.h"
#include "ir/ops/op_attrs.h"

namespace loom::exec::cuda {
namespace {

size_t ElementBytes(bool f64) { return f64 ? sizeof(double) : sizeof(float); }

// Row-major C[m, n] = alpha op(A) op(B) + beta C, `count` times with the given
// element strides between the batch entries. cuBLAS is column-major: a row-major
// matrix is its transpose, so C^T = op(B)^T op(A)^T is computed instead.
absl::Status Gemm(const OpContext& ctx, bool f64, bool ta, bool tb, int64_t m, int64_t n,
                  int64_t k, double alpha, const void* a, int64_t lda, int64_t stride_a,
                  const void* b, int64_t ldb, int64_t stride_b, double beta, void* c, int64_t ldc,
                  int64_t stride_c, int64_t count = 1) {
  // Empty products: the outputs are already zero (or kept, with beta 1).
  if (m == 0 || n == 0 || k == 0 || count == 0) return absl::OkStatus();
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s;
  if (f64) {
    s = cublasDgemmStridedBatched(ctx.blas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                  static_cast<int>(k), &alpha, static_cast<const double*>(b),
                                  static_cast<int>(ldb), stride_b, static_cast<const double*>(a),
                                  static_cast<int>(lda), stride_a, &beta, static_cast<double*>(c),
                                  static_cast<int>(ldc), stride_c, static_cast<int>(count));
  } else {
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    s = cublasSgemmStridedBatched(ctx.blas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                  static_cast<int>(k), &fa, static_cast<const float*>(b),
                                  static_cast<int>(ldb), stride_b, static_cast<const float*>(a),
                                  static_cast<int>(lda), stride_a, &fb, static_cast<float*>(c),
                                  static_cast<int>(ldc), stride_c, static_cast<int>(count));
  }
  return CublasError(s, "gemm");
}

const char* Offset(const DeviceTensor& t, int64_t elements) {
  return static_cast<const char*>(t.data) + elements * ElementBytes(t.f64);
}
char* Offset(DeviceTensor& t, int64_t elements) {
  return static_cast<char*>(t.data) + elements * ElementBytes(t.f64);
}

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

using AttentionDims = ir::ops::AttentionDims;

absl::StatusOr<AttentionDims> GetDims(absl::Span<const DeviceTensor> in,
                                      const ir::AttrMap& attrs) {
  std::vector<ir::TensorType> types;
  for (int i = 0; i < 3; ++i) {
    types.push_back({ir::Shape(std::vector<int64_t>(in[i].dims, in[i].dims + in[i].rank)),
                     in[i].f64 ? ir::DType::kF64 : ir::DType::kF32});
  }
  return ir::ops::GetAttentionDims(types, attrs);
}

// Scratch device memory for one op, freed in stream order.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    status_ = CudaError(cudaMallocAsync(&data_, bytes, stream), "scratch allocation");
  }
  ~Scratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  const absl::Status& status() const { return status_; }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
  absl::Status status_;
};

#define LOOM_CUDA_RETURN_IF_ERROR(expr)      \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (false)

// P = softmax(scale Q K^T) for the `group` query heads of kv head g in batch b:
// [group, s, t] at `p`.
absl::Status Weights(const AttentionDims& d, const DeviceTensor& q, const DeviceTensor& k,
                     int64_t b, int64_t g, void* p, const OpContext& ctx) {
  const int64_t h0 = g * d.group();
  LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, q.f64, false, true, d.s, d.t, d.dk, d.scale,
                                 Offset(q, (b * d.s * d.hq + h0) * d.dk), d.hq * d.dk, d.dk,
                                 Offset(k, (b * d.t * d.hkv + g) * d.dk), d.hkv * d.dk, 0, 0.0, p,
                                 d.t, d.s * d.t, d.group()));
  return CudaError(LaunchMaskedSoftmax(p, d.group() * d.s, d.s, d.t, d.causal, q.f64, ctx.stream),
                   "attention softmax");
}

absl::Status Attention(absl::Span<const DeviceTensor> in, const ir::AttrMap& attrs,
                       DeviceTensor& out, const OpContext& ctx) {
  auto dims = GetDims(in, attrs);
  if (!dims.ok()) return dims.status();
  const AttentionDims& d = *dims;
  const bool f64 = in[0].f64;
  Scratch p(d.group() * d.s * d.t * ElementBytes(f64), ctx.stream);
  LOOM_CUDA_RETURN_IF_ERROR(p.status());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t g = 0; g < d.hkv; ++g) {
      LOOM_CUDA_RETURN_IF_ERROR(Weights(d, in[0], in[1], b, g, p.data(), ctx));
      // O_h = P_h V_g for the group's heads.
      LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, false, false, d.s, d.dv, d.t, 1.0, p.data(), d.t,
                                     d.s * d.t, Offset(in[2], (b * d.t * d.hkv + g) * d.dv),
                                     d.hkv * d.dv, 0, 0.0,
                                     Offset(out, (b * d.s * d.hq + g * d.group()) * d.dv),
                                     d.hq * d.dv, d.dv, d.group()));
    }
  }
  return absl::OkStatus();
}

// dv = P^T do, dP = do v^T, dS = P * (dP - rowsum(P * dP)), dq = scale dS k,
// dk = scale dS^T q; kv gradients sum over the query heads of their group.
absl::Status AttentionGrad(absl::Span<const DeviceTensor> in, const ir::AttrMap& attrs,
                           absl::Span<DeviceTensor> out, const OpContext& ctx) {
  auto dims = GetDims(in, attrs);
  if (!dims.ok()) return dims.status();
  const AttentionDims& d = *dims;
  const bool f64 = in[0].f64;
  const DeviceTensor &q = in[0], &k = in[1], &v = in[2], &dout = in[3];
  DeviceTensor &dq = out[0], &dk = out[1], &dv = out[2];
  const size_t bytes = d.group() * d.s * d.t * ElementBytes(f64);
  Scratch p(bytes, ctx.stream), dp(bytes, ctx.stream);
  LOOM_CUDA_RETURN_IF_ERROR(p.status());
  LOOM_CUDA_RETURN_IF_ERROR(dp.status());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t g = 0; g < d.hkv; ++g) {
      const int64_t h0 = g * d.group();
      const int64_t qo = (b * d.s * d.hq + h0) * d.dk, ko = (b * d.t * d.hkv + g) * d.dk;
      const int64_t vo = (b * d.t * d.hkv + g) * d.dv, oo = (b * d.s * d.hq + h0) * d.dv;
      LOOM_CUDA_RETURN_IF_ERROR(Weights(d, q, k, b, g, p.data(), ctx));
      // dP = dO V^T for every head of the group.
      LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, false, true, d.s, d.t, d.dv, 1.0, Offset(dout, oo),
                                     d.hq * d.dv, d.dv, Offset(v, vo), d.hkv * d.dv, 0, 0.0,
                                     dp.data(), d.t, d.s * d.t, d.group()));
      LOOM_CUDA_RETURN_IF_ERROR(CudaError(
          LaunchSoftmaxBackward(p.data(), dp.data(), d.group() * d.s, d.t, f64, ctx.stream),
          "attention_grad softmax"));
      // dQ_h = scale dS_h K_g.
      LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, false, false, d.s, d.dk, d.t, d.scale, dp.data(),
                                     d.t, d.s * d.t, Offset(k, ko), d.hkv * d.dk, 0, 0.0,
                                     Offset(dq, qo), d.hq * d.dk, d.dk, d.group()));
      // dK_g += scale dS_h^T Q_h and dV_g += P_h^T dO_h, head by head (one output).
      for (int64_t j = 0; j < d.group(); ++j) {
        const char* ds = static_cast<const char*>(dp.data()) + j * d.s * d.t * ElementBytes(f64);
        const char* pj = static_cast<const char*>(p.data()) + j * d.s * d.t * ElementBytes(f64);
        LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, true, false, d.t, d.dk, d.s, d.scale, ds, d.t, 0,
                                       Offset(q, qo + j * d.dk), d.hq * d.dk, 0, 1.0,
                                       Offset(dk, ko), d.hkv * d.dk, 0));
        LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, true, false, d.t, d.dv, d.s, 1.0, pj, d.t, 0,
                                       Offset(dout, oo + j * d.dv), d.hq * d.dv, 0, 1.0,
                                       Offset(dv, vo), d.hkv * d.dv, 0));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunMatmulOp(ir::OpKind kind, const ir::AttrMap& attrs,
                         absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                         const OpContext& ctx) {
  switch (kind) {
    case ir::OpKind::kLinear:
      return Linear(in, out[0], ctx);
    case ir::OpKind::kLinearWGrad:
      return LinearWGrad(in, out[0], ctx);
    case ir::OpKind::kMatMul:
      return MatMul(in, out[0], ctx);
    case ir::OpKind::kAttention:
      return Attention(in, attrs, out[0], ctx);
    case ir::OpKind::kAttentionGrad:
      return AttentionGrad(in, attrs, out, ctx);
    default:
      return absl::UnimplementedError(
          absl::StrCat("no CUDA kernel for '", ir::OpKindName(kind), "' in the matmul family"));
  }
}

}  // namespace loom::exec::cuda
