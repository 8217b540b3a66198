// The attention family on the GPU: attention and its gradient as cuBLAS products
// per batch and key/value head around a masked softmax, and rope. Exactly the
// reference's semantics and attributes (ir/ops/attention.cc); the kernels live in
// attention_kernels.cu.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/attention_kernels.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/op_checks.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

size_t ElementBytes(bool f64) { return f64 ? sizeof(double) : sizeof(float); }

const char* Offset(const DeviceTensor& t, int64_t elements) {
  return static_cast<const char*>(t.data) + elements * ElementBytes(t.f64);
}
char* Offset(DeviceTensor& t, int64_t elements) {
  return static_cast<char*>(t.data) + elements * ElementBytes(t.f64);
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

// Scores scale Q K^T for the `group` query heads of kv head g in batch b:
// [group, s, t] at `p`.
absl::Status Scores(const AttentionDims& d, const DeviceTensor& q, const DeviceTensor& k,
                    int64_t b, int64_t g, void* p, const OpContext& ctx) {
  const int64_t h0 = g * d.group();
  return Gemm(ctx, q.f64, false, true, d.s, d.t, d.dk, d.scale,
              Offset(q, (b * d.s * d.hq + h0) * d.dk), d.hq * d.dk, d.dk,
              Offset(k, (b * d.t * d.hkv + g) * d.dk), d.hkv * d.dk, 0, 0.0, p, d.t, d.s * d.t,
              d.group());
}

// Where query i sees key j: j <= i + shift.
int64_t Shift(const AttentionDims& d) { return d.q_offset - d.k_offset; }

absl::Status Attention(absl::Span<const DeviceTensor> in, const ir::AttrMap& attrs,
                       absl::Span<DeviceTensor> out, const OpContext& ctx) {
  auto dims = GetDims(in, attrs);
  if (!dims.ok()) return dims.status();
  const AttentionDims& d = *dims;
  const bool f64 = in[0].f64;
  Scratch p(d.group() * d.s * d.t * ElementBytes(f64), ctx.stream);
  LOOM_CUDA_RETURN_IF_ERROR(p.status());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t g = 0; g < d.hkv; ++g) {
      const int64_t h0 = g * d.group();
      LOOM_CUDA_RETURN_IF_ERROR(Scores(d, in[0], in[1], b, g, p.data(), ctx));
      LOOM_CUDA_RETURN_IF_ERROR(CudaError(
          LaunchMaskedSoftmax(p.data(), d.group() * d.s, d.s, d.t, d.causal, Shift(d),
                              Offset(out[1], b * d.s * d.hq + h0), d.hq, f64, ctx.stream),
          "attention softmax"));
      // O_h = P_h V_g for the group's heads.
      LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, false, false, d.s, d.dv, d.t, 1.0, p.data(), d.t,
                                     d.s * d.t, Offset(in[2], (b * d.t * d.hkv + g) * d.dv),
                                     d.hkv * d.dv, 0, 0.0,
                                     Offset(out[0], (b * d.s * d.hq + h0) * d.dv),
                                     d.hq * d.dv, d.dv, d.group()));
    }
  }
  return absl::OkStatus();
}

// With the forward's out o and log-sum-exp L: P = exp(scale Q K^T - L), dv = P^T do,
// dP = do v^T, dS = P * (dP - rowsum(do * o) + dL), dq = scale dS k, dk = scale dS^T q
// (dL the log-sum-exp's gradient where given); kv gradients sum over the query heads
// of their group.
absl::Status AttentionGrad(absl::Span<const DeviceTensor> in, const ir::AttrMap& attrs,
                           absl::Span<DeviceTensor> out, const OpContext& ctx) {
  auto dims = GetDims(in, attrs);
  if (!dims.ok()) return dims.status();
  const AttentionDims& d = *dims;
  const bool f64 = in[0].f64;
  const DeviceTensor &q = in[0], &k = in[1], &v = in[2], &o = in[3], &lse = in[4],
                     &dout = in[5];
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
      LOOM_CUDA_RETURN_IF_ERROR(Scores(d, q, k, b, g, p.data(), ctx));
      // dP = dO V^T for every head of the group.
      LOOM_CUDA_RETURN_IF_ERROR(Gemm(ctx, f64, false, true, d.s, d.t, d.dv, 1.0, Offset(dout, oo),
                                     d.hq * d.dv, d.dv, Offset(v, vo), d.hkv * d.dv, 0, 0.0,
                                     dp.data(), d.t, d.s * d.t, d.group()));
      LOOM_CUDA_RETURN_IF_ERROR(CudaError(
          LaunchFlashSoftmaxBackward(
              p.data(), dp.data(), d.group() * d.s, d.s, d.t, d.causal, Shift(d),
              Offset(lse, b * d.s * d.hq + h0),
              in.size() > 6 ? Offset(in[6], b * d.s * d.hq + h0) : nullptr, Offset(o, oo),
              Offset(dout, oo), d.hq, d.dv, f64, ctx.stream),
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

// rope {theta=10000, inverse=0, offset=0} on x [b, s, h, d], d even.
absl::Status RunRope(const ir::AttrMap& attrs, absl::Span<const DeviceTensor> in,
                     absl::Span<DeviceTensor> out, const OpContext& ctx) {
  LOOM_RETURN_IF_ERROR(CheckTensors(OpKind::kRope, in, 1, out, 1));
  LOOM_ASSIGN_OR_RETURN(double theta, attrs.GetFloat("theta", 10000.0));
  LOOM_ASSIGN_OR_RETURN(int64_t inverse, attrs.GetInt("inverse", 0));
  LOOM_ASSIGN_OR_RETURN(int64_t offset, attrs.GetInt("offset", 0));
  if (offset < 0) return absl::InvalidArgumentError("attribute 'offset' is negative");
  if (!(theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'theta' is ", theta, ", expected a positive number"));
  }
  if (inverse != 0 && inverse != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'inverse' is ", inverse, ", expected 0 or 1"));
  }
  const DeviceTensor& x = in[0];
  if (x.rank != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope input has ", x.rank, " dims, expected 4 [b, s, h, d]"));
  }
  if (x.dim(3) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope input has odd head size ", x.dim(3), ", expected an even one"));
  }
  return LaunchStatus(LaunchRope(x, theta, inverse == 1, offset, out[0], ctx.stream),
                      OpKind::kRope);
}

}  // namespace

absl::Status RunAttentionOp(ir::OpKind kind, const ir::AttrMap& attrs,
                            absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                            const OpContext& ctx) {
  switch (kind) {
    case OpKind::kAttention:
      return Attention(in, attrs, out, ctx);
    case OpKind::kAttentionGrad:
      return AttentionGrad(in, attrs, out, ctx);
    case OpKind::kRope:
      return RunRope(attrs, in, out, ctx);
    default:
      return NotInFamily(kind, "attention");
  }
}

}  // namespace loom::exec::cuda
