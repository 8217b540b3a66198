// Attention and RoPE. Layouts are [batch, sequence, heads, head dim].

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/ops/op_attrs.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {

namespace {

using ops::AttentionDims;
using ops::GetAttentionDims;
using ops::ExpectDims;
using ops::ExpectFloat;
using ops::ExpectRank;
using ops::FlopsPerOutputElement;

// Dim `dj` of input j equals dim `di` of input i.
absl::Status ExpectDimMatch(absl::Span<const TensorType> in, int j, int dj, int i, int di) {
  if (in[j].shape.dim(dj) != in[i].shape.dim(di)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", j, " has size ", in[j].shape.dim(dj), " at dim ", dj, ", expected ",
                     in[i].shape.dim(di), " like dim ", di, " of input ", i));
  }
  return absl::OkStatus();
}

}  // namespace

namespace ops {

// Checks q [b, s, hq, dk], k [b, t, hkv, dk], v [b, t, hkv, dv] and the attributes.
absl::StatusOr<AttentionDims> GetAttentionDims(absl::Span<const TensorType> in,
                                               const AttrMap& attrs) {
  for (int i = 0; i < 3; ++i) {
    LOOM_RETURN_IF_ERROR(ExpectRank(in, i, 4));
    LOOM_RETURN_IF_ERROR(ExpectFloat(in, i));
    if (in[i].dtype != in[0].dtype) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " has dtype ",
                                                     DTypeName(in[i].dtype), ", expected ",
                                                     DTypeName(in[0].dtype), " like input 0"));
    }
  }
  LOOM_RETURN_IF_ERROR(ExpectDimMatch(in, 1, 0, 0, 0));  // batch
  LOOM_RETURN_IF_ERROR(ExpectDimMatch(in, 1, 3, 0, 3));  // head size of q and k
  LOOM_RETURN_IF_ERROR(ExpectDimMatch(in, 2, 0, 0, 0));  // batch
  LOOM_RETURN_IF_ERROR(ExpectDimMatch(in, 2, 1, 1, 1));  // key positions
  LOOM_RETURN_IF_ERROR(ExpectDimMatch(in, 2, 2, 1, 2));  // kv heads
  AttentionDims d;
  d.batch = in[0].shape.dim(0);
  d.s = in[0].shape.dim(1);
  d.hq = in[0].shape.dim(2);
  d.dk = in[0].shape.dim(3);
  d.t = in[1].shape.dim(1);
  d.hkv = in[1].shape.dim(2);
  d.dv = in[2].shape.dim(3);
  if (d.hkv < 1 || d.hq % d.hkv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query heads (", d.hq, ") are not a multiple of key/value heads (", d.hkv, ")"));
  }
  if (d.dk < 1) return absl::InvalidArgumentError("query/key head size is 0");
  LOOM_ASSIGN_OR_RETURN(int64_t causal, attrs.GetInt("causal", 1));
  if (causal != 0 && causal != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'causal' is ", causal, ", expected 0 or 1"));
  }
  d.causal = causal == 1;
  if (d.causal && d.s != d.t) {
    return absl::InvalidArgumentError(
        absl::StrCat("causal attention needs as many queries (", d.s, ") as keys (", d.t, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(d.scale,
                        attrs.GetFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.dk))));
  return d;
}


}  // namespace ops

namespace {

absl::StatusOr<AttentionDims> GetAttentionDims(absl::Span<const HostTensor* const> in,
                                               const AttrMap& attrs) {
  std::vector<TensorType> types;
  for (int i = 0; i < 3; ++i) types.push_back({in[i]->shape, in[i]->dtype});
  return ops::GetAttentionDims(types, attrs);
}

// RoPE attributes: base `theta` and the direction of rotation.
struct RopeParams {
  double theta = 10000.0;
  bool inverse = false;
};

absl::StatusOr<RopeParams> GetRopeParams(const AttrMap& attrs) {
  RopeParams p;
  LOOM_ASSIGN_OR_RETURN(p.theta, attrs.GetFloat("theta", 10000.0));
  LOOM_ASSIGN_OR_RETURN(int64_t inverse, attrs.GetInt("inverse", 0));
  if (!(p.theta > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'theta' is ", p.theta, ", expected a positive number"));
  }
  if (inverse != 0 && inverse != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'inverse' is ", inverse, ", expected 0 or 1"));
  }
  p.inverse = inverse == 1;
  return p;
}

// ---- shape rules ---------------------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferAttention(absl::Span<const TensorType> in,
                                                       const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  return std::vector<TensorType>{ops::Like(in[0], {d.batch, d.s, d.hq, d.dv})};
}

absl::StatusOr<std::vector<TensorType>> InferAttentionGrad(absl::Span<const TensorType> in,
                                                           const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 3));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 3, {d.batch, d.s, d.hq, d.dv}));
  return std::vector<TensorType>{in[0], in[1], in[2]};
}

absl::StatusOr<std::vector<TensorType>> InferRope(absl::Span<const TensorType> in,
                                                  const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 4));
  LOOM_RETURN_IF_ERROR(GetRopeParams(attrs).status());
  if (in[0].shape.dim(3) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 0 has odd head size ", in[0].shape.dim(3), ", expected an even one"));
  }
  return std::vector<TensorType>{in[0]};
}

// ---- signatures ----------------------------------------------------------------

// "b s h dk, b t g dk, b t g dv -> b s h dv | dk:fixed s:fixed t:fixed coupled(h,g)".
// Query heads h and kv heads g split together so every query head keeps its kv head.
absl::StatusOr<DimSignature> SignatureAttention(absl::Span<const TensorType>, const AttrMap&) {
  DimSignature sig;
  sig.inputs = {{"b", "s", "h", "dk"}, {"b", "t", "g", "dk"}, {"b", "t", "g", "dv"}};
  sig.outputs = {{"b", "s", "h", "dv"}};
  sig.kinds = {{"b", DimKind::kSpatial}, {"s", DimKind::kFixed},   {"t", DimKind::kFixed},
               {"h", DimKind::kSpatial}, {"g", DimKind::kSpatial}, {"dk", DimKind::kFixed},
               {"dv", DimKind::kSpatial}};
  sig.coupled = {{"h", "g"}};
  return sig;
}

// As attention, plus dout "b s h dv" and outputs dq, dk, dv. dv is fixed here: dq and
// dk contract dout with v over it, while dv keeps it, so no single kind fits.
absl::StatusOr<DimSignature> SignatureAttentionGrad(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(DimSignature sig, SignatureAttention(in, attrs));
  sig.inputs.push_back(sig.outputs[0]);
  sig.outputs = {sig.inputs[0], sig.inputs[1], sig.inputs[2]};
  sig.kinds["dv"] = DimKind::kFixed;
  return sig;
}

// "b s h d -> b s h d | d:fixed s:fixed": the angle depends on the absolute position.
absl::StatusOr<DimSignature> SignatureRope(absl::Span<const TensorType>, const AttrMap&) {
  DimSignature sig;
  sig.inputs = {{"b", "s", "h", "d"}};
  sig.outputs = sig.inputs;
  sig.kinds = {{"b", DimKind::kSpatial},
               {"s", DimKind::kFixed},
               {"h", DimKind::kSpatial},
               {"d", DimKind::kFixed}};
  return sig;
}

// ---- FLOPs -------------------------------------------------------------------------

// 2*b*hq*s*t*(dk+dv): scores and weighted values; causal masking keeps (t+1)/(2t).
double FlopsAttention(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                      const AttrMap& attrs) {
  const Shape& q = in[0].shape;
  const Shape& v = in[2].shape;
  const double t = static_cast<double>(v.dim(1));
  double flops = 2.0 * static_cast<double>(q.dim(0) * q.dim(1) * q.dim(2)) * t *
                 static_cast<double>(q.dim(3) + v.dim(3));
  if (attrs.GetInt("causal", 1).value_or(1) != 0 && t > 0) flops *= (t + 1) / (2 * t);
  return flops;
}

double FlopsAttentionGrad(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                          const AttrMap& attrs) {
  return 2.5 * FlopsAttention(in, out, attrs);
}

double FlopsRope(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, 3);  // two products and a sum per element
}

// ---- kernels -------------------------------------------------------------------

// Offset of element [b, pos, head, x] of a row-major [B, L, H, D] tensor.
int64_t At(const HostTensor& x, int64_t b, int64_t pos, int64_t head, int64_t i) {
  const Shape& s = x.shape;
  return ((b * s.dim(1) + pos) * s.dim(2) + head) * s.dim(3) + i;
}

// Softmax weights of query `i` of head `h` in batch `b` over the keys it sees,
// written to p[0, n); returns n.
int64_t AttentionWeights(const AttentionDims& d, const HostTensor& q, const HostTensor& k,
                         int64_t b, int64_t h, int64_t i, std::vector<double>& p) {
  const int64_t g = h / d.group();
  const int64_t n = d.causal ? i + 1 : d.t;
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t x = 0; x < d.dk; ++x) dot += q[At(q, b, i, h, x)] * k[At(k, b, j, g, x)];
    p[j] = d.scale * dot;
    max_score = std::max(max_score, p[j]);
  }
  double total = 0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - max_score);
    total += p[j];
  }
  for (int64_t j = 0; j < n; ++j) p[j] /= total;
  return n;
}

absl::Status KernelAttention(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                             absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const HostTensor& v = *in[2];
  std::vector<double> p(d.t);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t n = AttentionWeights(d, *in[0], *in[1], b, h, i, p);
        for (int64_t x = 0; x < d.dv; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * v[At(v, b, j, g, x)];
          out[0][At(out[0], b, i, h, x)] = acc;
        }
      }
    }
  }
  return absl::OkStatus();
}

// With P = softmax(S), S = scale q k^T, o = P v:
//   dv = P^T do, dP = do v^T, dS = P * (dP - rowsum(P * dP)), dq = scale dS k,
//   dk = scale dS^T q; kv gradients sum over the query heads of their group.
absl::Status KernelAttentionGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                 absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const HostTensor& q = *in[0];
  const HostTensor& k = *in[1];
  const HostTensor& v = *in[2];
  const HostTensor& dout = *in[3];
  HostTensor& dq = out[0];
  HostTensor& dk = out[1];
  HostTensor& dv = out[2];
  std::vector<double> p(d.t);
  std::vector<double> dp(d.t);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t n = AttentionWeights(d, q, k, b, h, i, p);
        double row_dot = 0;
        for (int64_t j = 0; j < n; ++j) {
          dp[j] = 0;
          for (int64_t x = 0; x < d.dv; ++x) {
            dp[j] += dout[At(dout, b, i, h, x)] * v[At(v, b, j, g, x)];
          }
          row_dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - row_dot);
          for (int64_t x = 0; x < d.dk; ++x) {
            dq[At(dq, b, i, h, x)] += d.scale * ds * k[At(k, b, j, g, x)];
            dk[At(dk, b, j, g, x)] += d.scale * ds * q[At(q, b, i, h, x)];
          }
          for (int64_t x = 0; x < d.dv; ++x) {
            dv[At(dv, b, j, g, x)] += p[j] * dout[At(dout, b, i, h, x)];
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

// Rotate-half RoPE: for i < d/2 the pair (i, i + d/2) at position `pos` turns by
// pos * theta^(-2i/d) (the opposite way when inverse).
absl::Status KernelRope(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                        absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(RopeParams params, GetRopeParams(attrs));
  const HostTensor& x = *in[0];
  const Shape& s = x.shape;
  const int64_t d = s.dim(3);
  const int64_t half = d / 2;
  const double sign = params.inverse ? -1.0 : 1.0;
  for (int64_t b = 0; b < s.dim(0); ++b) {
    for (int64_t pos = 0; pos < s.dim(1); ++pos) {
      for (int64_t h = 0; h < s.dim(2); ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = sign * static_cast<double>(pos) *
                               std::pow(params.theta, -2.0 * static_cast<double>(i) / d);
          const double c = std::cos(angle);
          const double sn = std::sin(angle);
          const double x1 = x[At(x, b, pos, h, i)];
          const double x2 = x[At(x, b, pos, h, i + half)];
          out[0][At(x, b, pos, h, i)] = x1 * c - x2 * sn;
          out[0][At(x, b, pos, h, i + half)] = x2 * c + x1 * sn;
        }
      }
    }
  }
  return absl::OkStatus();
}

// ---- gradient rules ------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

Grads GradAttention(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dout, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> d,
                        b.Emit(OpKind::kAttentionGrad, {b.input(0), b.input(1), b.input(2), dout},
                               b.op().attrs, b.GradName(0)));
  LOOM_RET_CHECK(d.size() == 3) << "attention_grad gave " << d.size() << " outputs";
  return std::vector<std::optional<TensorId>>{d[0], d[1], d[2]};
}

// RoPE is a rotation: its gradient is the rotation by the opposite angle.
Grads GradRope(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(RopeParams params, GetRopeParams(b.op().attrs));
  AttrMap attrs = b.op().attrs;
  attrs.Set("inverse", int64_t{params.inverse ? 0 : 1});
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kRope, {dy}, attrs, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

}  // namespace

void RegisterAttentionOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc});
  };
  reg(OpKind::kAttention, InferAttention, SignatureAttention, KernelAttention, FlopsAttention,
      GradAttention,
      "attention(q [b,s,hq,dk], k [b,t,hkv,dk], v [b,t,hkv,dv]) {causal=1, scale} -> "
      "[b,s,hq,dv]");
  reg(OpKind::kAttentionGrad, InferAttentionGrad, SignatureAttentionGrad, KernelAttentionGrad,
      FlopsAttentionGrad, nullptr, "attention_grad(q, k, v, dout) {causal, scale} -> (dq, dk, dv)")
      .Homogeneous({3}, 1);
  reg(OpKind::kRope, InferRope, SignatureRope, KernelRope, FlopsRope, GradRope,
      "rope(x [b,s,h,d]) {theta=10000, inverse=0} -> x rotated by position (rotate-half)")
      .Homogeneous({0}, 1);
}

}  // namespace loom::ir
