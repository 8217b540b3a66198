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
  LOOM_ASSIGN_OR_RETURN(d.scale,
                        attrs.GetFloat("scale", 1.0 / std::sqrt(static_cast<double>(d.dk))));
  LOOM_ASSIGN_OR_RETURN(d.q_offset, attrs.GetInt("q_offset", 0));
  LOOM_ASSIGN_OR_RETURN(d.k_offset, attrs.GetInt("k_offset", 0));
  if (d.q_offset < 0 || d.k_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '",
                                                   d.q_offset < 0 ? "q_offset" : "k_offset",
                                                   "' is negative"));
  }
  return d;
}

// Visible(i) is 0 for i < lo, c + i for lo <= i < hi and t from hi on, with
// c = q_offset - k_offset + 1.
double MergeLogSumExps(absl::Span<const double> lses, std::vector<double>* weights) {
  double m = -std::numeric_limits<double>::infinity();
  for (double l : lses) m = std::max(m, l);
  weights->assign(lses.size(), 0.0);
  if (!std::isfinite(m)) return m;
  double total = 0;
  for (double l : lses) total += std::exp(l - m);
  const double lse = m + std::log(total);
  for (size_t i = 0; i < lses.size(); ++i) (*weights)[i] = std::exp(lses[i] - lse);
  return lse;
}

double AttentionDims::VisiblePairs() const {
  if (!causal) return static_cast<double>(s) * static_cast<double>(t);
  const int64_t c = q_offset - k_offset + 1;
  const int64_t lo = std::clamp<int64_t>(-c + 1, 0, s);
  const int64_t hi = std::clamp<int64_t>(t - c, lo, s);
  const double n = static_cast<double>(hi - lo);
  const double first = static_cast<double>(c + lo);
  return n * first + n * (n - 1) / 2 + static_cast<double>(s - hi) * static_cast<double>(t);
}

}  // namespace ops

namespace {

absl::StatusOr<AttentionDims> GetAttentionDims(absl::Span<const HostTensor* const> in,
                                               const AttrMap& attrs) {
  std::vector<TensorType> types;
  for (int i = 0; i < 3; ++i) types.push_back({in[i]->shape, in[i]->dtype});
  return ops::GetAttentionDims(types, attrs);
}

// RoPE attributes: base `theta`, the direction of rotation and the position of
// the first row in the whole sequence (a sequence chunk's, under context
// parallelism).
struct RopeParams {
  double theta = 10000.0;
  bool inverse = false;
  int64_t offset = 0;
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
  LOOM_ASSIGN_OR_RETURN(p.offset, attrs.GetInt("offset", 0));
  if (p.offset < 0) return absl::InvalidArgumentError("attribute 'offset' is negative");
  return p;
}

// ---- shape rules ---------------------------------------------------------------

// The log-sum-exp of each query row: float32 for 16-bit inputs (as flash
// attention keeps it), else the inputs' dtype.
TensorType LogSumExpType(const TensorType& q, const AttentionDims& d) {
  TensorType t = ops::Like(q, {d.batch, d.s, d.hq});
  if (t.dtype == DType::kBF16 || t.dtype == DType::kF16) t.dtype = DType::kF32;
  return t;
}

absl::StatusOr<std::vector<TensorType>> InferAttention(absl::Span<const TensorType> in,
                                                       const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  return std::vector<TensorType>{ops::Like(in[0], {d.batch, d.s, d.hq, d.dv}),
                                 LogSumExpType(in[0], d)};
}

// q, k, v, then the forward's out [b,s,hq,dv] and lse [b,s,hq], dout like out and,
// where something reads the log-sum-exp, its gradient dlse like lse.
absl::StatusOr<std::vector<TensorType>> InferAttentionGrad(absl::Span<const TensorType> in,
                                                           const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  for (int i = 3; i < static_cast<int>(in.size()); ++i) LOOM_RETURN_IF_ERROR(ExpectFloat(in, i));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 3, {d.batch, d.s, d.hq, d.dv}));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 4, {d.batch, d.s, d.hq}));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 5, {d.batch, d.s, d.hq, d.dv}));
  if (in.size() > 6) LOOM_RETURN_IF_ERROR(ExpectDims(in, 6, {d.batch, d.s, d.hq}));
  return std::vector<TensorType>{in[0], in[1], in[2]};
}

// Two partial softmaxes (o [b,s,h,d], lse [b,s,h]) of one query block.
absl::StatusOr<std::vector<TensorType>> InferAttentionMerge(absl::Span<const TensorType> in,
                                                            const AttrMap&) {
  for (int i = 0; i < 4; ++i) LOOM_RETURN_IF_ERROR(ExpectFloat(in, i));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 0, 4));
  const Shape& o = in[0].shape;
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 1, {o.dim(0), o.dim(1), o.dim(2)}));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 2, o.dims()));
  LOOM_RETURN_IF_ERROR(ExpectDims(in, 3, {o.dim(0), o.dim(1), o.dim(2)}));
  return std::vector<TensorType>{in[0], in[1]};
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

// "b s h dk, b t g dk, b t g dv -> b s h dv, b s h | dk:fixed dv:fixed t:logsumexp
// coupled(h,g)". Query heads h and kv heads g split together so every query head
// keeps its kv head. A piece over a block of queries is that block of the output
// (its attributes place it: q_offset); a piece over a chunk of the keys is a partial
// softmax, merged with the others' by attention_merge. dv is fixed: the log-sum-exp
// does not carry it.
absl::StatusOr<DimSignature> SignatureAttention(absl::Span<const TensorType>, const AttrMap&) {
  DimSignature sig;
  sig.inputs = {{"b", "s", "h", "dk"}, {"b", "t", "g", "dk"}, {"b", "t", "g", "dv"}};
  sig.outputs = {{"b", "s", "h", "dv"}, {"b", "s", "h"}};
  sig.kinds = {{"b", DimKind::kSpatial}, {"s", DimKind::kSpatial},
               {"t", DimKind::kLogSumExpReduction},
               {"h", DimKind::kSpatial}, {"g", DimKind::kSpatial}, {"dk", DimKind::kFixed},
               {"dv", DimKind::kFixed}};
  sig.coupled = {{"h", "g"}};
  return sig;
}

// q, k, v, out, lse, dout -> dq, dk, dv. Given the forward's log-sum-exp every
// (query, key) pair's weight is known on its own, so a piece over a chunk of the
// keys holds a partial sum of dq and a piece over a block of queries partial sums of
// dk and dv: s and t are both reductions (each kept by the outputs that carry it).
absl::StatusOr<DimSignature> SignatureAttentionGrad(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(DimSignature sig, SignatureAttention(in, attrs));
  const std::vector<std::string> out = sig.outputs[0];
  const std::vector<std::string> lse = sig.outputs[1];
  sig.inputs.push_back(out);
  sig.inputs.push_back(lse);
  sig.inputs.push_back(out);
  if (in.size() > 6) sig.inputs.push_back(lse);
  sig.outputs = {sig.inputs[0], sig.inputs[1], sig.inputs[2]};
  sig.kinds["s"] = DimKind::kReduction;
  sig.kinds["t"] = DimKind::kReduction;
  return sig;
}

// "b s h d, b s h, b s h d, b s h -> b s h d, b s h | d:fixed".
absl::StatusOr<DimSignature> SignatureAttentionMerge(absl::Span<const TensorType>,
                                                     const AttrMap&) {
  DimSignature sig;
  const std::vector<std::string> o = {"b", "s", "h", "d"}, l = {"b", "s", "h"};
  sig.inputs = {o, l, o, l};
  sig.outputs = {o, l};
  sig.kinds = {{"b", DimKind::kSpatial}, {"s", DimKind::kSpatial}, {"h", DimKind::kSpatial},
               {"d", DimKind::kFixed}};
  return sig;
}

// "b s h d -> b s h d | d:fixed": a piece over a block of positions rotates them by
// their own angles (its attribute offset places it).
absl::StatusOr<DimSignature> SignatureRope(absl::Span<const TensorType>, const AttrMap&) {
  DimSignature sig;
  sig.inputs = {{"b", "s", "h", "d"}};
  sig.outputs = sig.inputs;
  sig.kinds = {{"b", DimKind::kSpatial},
               {"s", DimKind::kSpatial},
               {"h", DimKind::kSpatial},
               {"d", DimKind::kFixed}};
  return sig;
}

// ---- piece attributes -------------------------------------------------------------

// `name` set to `value`, or left out where 0 (the default), so that a piece at the
// origin has the op's own attributes.
void SetOffset(AttrMap& attrs, const char* name, int64_t value) {
  if (value == 0) {
    attrs.Erase(name);
  } else {
    attrs.Set(name, value);
  }
}

// A causal attention's piece sees keys by their place in the sequence: its first
// query's and first key's positions go into q_offset and k_offset. A non-causal
// piece does not depend on where it lies.
absl::StatusOr<AttrMap> ShardAttention(const AttrMap& attrs, absl::Span<const TensorType> in,
                                       absl::Span<const Box> in_boxes,
                                       absl::Span<const TensorType>, absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  if (!d.causal) return attrs;
  AttrMap out = attrs;
  SetOffset(out, "q_offset", d.q_offset + in_boxes[0][1].begin);
  SetOffset(out, "k_offset", d.k_offset + in_boxes[1][1].begin);
  return out;
}

// The same scale and the same keys seen by every query (Visible), whatever the
// attributes say: a causal block that sees all its keys is a full attention, and
// causal blocks with the same q_offset - k_offset mask alike.
bool SameAttention(const AttrMap& a, const AttrMap& b, absl::Span<const TensorType> in) {
  absl::StatusOr<AttentionDims> x = GetAttentionDims(in, a);
  absl::StatusOr<AttentionDims> y = GetAttentionDims(in, b);
  if (!x.ok() || !y.ok() || x->scale != y->scale) return false;
  AttrMap rest_a = a, rest_b = b;
  for (const char* name : {"causal", "scale", "q_offset", "k_offset"}) {
    rest_a.Erase(name);
    rest_b.Erase(name);
  }
  if (rest_a != rest_b) return false;
  if (x->causal == y->causal && (!x->causal || x->q_offset - x->k_offset ==
                                                   y->q_offset - y->k_offset)) {
    return true;
  }
  for (int64_t i = 0; i < x->s; ++i) {
    if (x->Visible(i) != y->Visible(i)) return false;
  }
  return true;
}

absl::StatusOr<AttrMap> ShardRope(const AttrMap& attrs, absl::Span<const TensorType>,
                                  absl::Span<const Box> in_boxes, absl::Span<const TensorType>,
                                  absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(RopeParams p, GetRopeParams(attrs));
  AttrMap out = attrs;
  SetOffset(out, "offset", p.offset + in_boxes[0][1].begin);
  return out;
}

// ---- FLOPs -------------------------------------------------------------------------

// 2*b*hq*(dk+dv) per (query, key) pair attended: scores and weighted values.
double FlopsAttention(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                      const AttrMap& attrs) {
  absl::StatusOr<AttentionDims> d = GetAttentionDims(in, attrs);
  if (!d.ok()) return 0;
  return 2.0 * static_cast<double>(d->batch * d->hq * (d->dk + d->dv)) * d->VisiblePairs();
}

double FlopsAttentionGrad(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                          const AttrMap& attrs) {
  return 2.5 * FlopsAttention(in, out, attrs);
}

double FlopsAttentionMerge(absl::Span<const TensorType>, absl::Span<const TensorType> out,
                           const AttrMap&) {
  return FlopsPerOutputElement(out, 6);  // two weights, two products, a sum; the lse
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

// Scores of query `i` of head `h` in batch `b` against the keys it sees, written to
// p[0, n); returns n and sets `lse` to their log-sum-exp (-inf when n is 0).
int64_t AttentionScores(const AttentionDims& d, const HostTensor& q, const HostTensor& k,
                        int64_t b, int64_t h, int64_t i, std::vector<double>& p, double& lse) {
  const int64_t g = h / d.group();
  const int64_t n = d.Visible(i);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t x = 0; x < d.dk; ++x) dot += q[At(q, b, i, h, x)] * k[At(k, b, j, g, x)];
    p[j] = d.scale * dot;
    max_score = std::max(max_score, p[j]);
  }
  double total = 0;
  for (int64_t j = 0; j < n; ++j) total += std::exp(p[j] - max_score);
  lse = n == 0 ? -std::numeric_limits<double>::infinity() : max_score + std::log(total);
  return n;
}

// out = softmax(scale q k^T) v over the keys each query sees, and each query row's
// log-sum-exp of its scores; a row that sees no key gives 0 and -inf.
absl::Status KernelAttention(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                             absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const HostTensor& v = *in[2];
  std::vector<double> p(d.t);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        double lse = 0;
        const int64_t n = AttentionScores(d, *in[0], *in[1], b, h, i, p, lse);
        for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - lse);
        for (int64_t x = 0; x < d.dv; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * v[At(v, b, j, g, x)];
          out[0][At(out[0], b, i, h, x)] = acc;
        }
        out[1][(b * d.s + i) * d.hq + h] = lse;
      }
    }
  }
  return absl::OkStatus();
}

// With the forward's out o and log-sum-exp L: P = exp(S - L), S = scale q k^T,
//   dv = P^T do, dP = do v^T, dS = P * (dP - rowsum(do * o) + dL), dq = scale dS k,
//   dk = scale dS^T q; kv gradients sum over the query heads of their group. dL, the
//   log-sum-exp's gradient, is 0 unless given (dL/dS = P).
// Every (query, key) pair's term is known on its own, so pieces over key chunks
// or query blocks add up.
absl::Status KernelAttentionGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                 absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(AttentionDims d, GetAttentionDims(in, attrs));
  const HostTensor& q = *in[0];
  const HostTensor& k = *in[1];
  const HostTensor& v = *in[2];
  const HostTensor& o = *in[3];
  const HostTensor& lse = *in[4];
  const HostTensor& dout = *in[5];
  HostTensor& dq = out[0];
  HostTensor& dk = out[1];
  HostTensor& dv = out[2];
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / d.group();
      for (int64_t i = 0; i < d.s; ++i) {
        const double row_lse = lse[(b * d.s + i) * d.hq + h];
        double row_dot = in.size() > 6 ? -(*in[6])[(b * d.s + i) * d.hq + h] : 0.0;
        for (int64_t x = 0; x < d.dv; ++x) {
          row_dot += dout[At(dout, b, i, h, x)] * o[At(o, b, i, h, x)];
        }
        for (int64_t j = 0, n = d.Visible(i); j < n; ++j) {
          double score = 0, dp = 0;
          for (int64_t x = 0; x < d.dk; ++x) score += q[At(q, b, i, h, x)] * k[At(k, b, j, g, x)];
          for (int64_t x = 0; x < d.dv; ++x) {
            dp += dout[At(dout, b, i, h, x)] * v[At(v, b, j, g, x)];
          }
          const double p = std::exp(d.scale * score - row_lse);
          const double ds = p * (dp - row_dot);
          for (int64_t x = 0; x < d.dk; ++x) {
            dq[At(dq, b, i, h, x)] += d.scale * ds * k[At(k, b, j, g, x)];
            dk[At(dk, b, j, g, x)] += d.scale * ds * q[At(q, b, i, h, x)];
          }
          for (int64_t x = 0; x < d.dv; ++x) {
            dv[At(dv, b, j, g, x)] += p * dout[At(dout, b, i, h, x)];
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

// Two partial softmaxes of one query row, (o1, l1) and (o2, l2), merged by the
// online-softmax identity: L = log(exp(l1) + exp(l2)), o = o1 exp(l1 - L) +
// o2 exp(l2 - L), computed from the larger log-sum-exp (a row with nothing on
// either side stays 0 and -inf).
absl::Status KernelAttentionMerge(absl::Span<const HostTensor* const> in, const AttrMap&,
                                  absl::Span<HostTensor> out) {
  const HostTensor& o1 = *in[0];
  const HostTensor& l1 = *in[1];
  const HostTensor& o2 = *in[2];
  const HostTensor& l2 = *in[3];
  const int64_t d = o1.shape.dim(3);
  std::vector<double> w;
  for (int64_t r = 0; r < l1.shape.num_elements(); ++r) {
    const double lses[2] = {l1[r], l2[r]};
    out[1][r] = ops::MergeLogSumExps(lses, &w);
    for (int64_t x = 0; x < d; ++x) out[0][r * d + x] = o1[r * d + x] * w[0] + o2[r * d + x] * w[1];
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
          const double angle = sign * static_cast<double>(params.offset + pos) *
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

// The backward reads the forward's output and log-sum-exp (flash attention's), and
// the log-sum-exp's own gradient where something read it.
Grads GradAttention(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dout, b.GradOutputOrZeros(0));
  std::vector<TensorId> inputs = {b.input(0),  b.input(1),  b.input(2),
                                  b.output(0), b.output(1), dout};
  if (std::optional<TensorId> dlse = b.grad_output(1)) inputs.push_back(*dlse);
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> d,
                        b.Emit(OpKind::kAttentionGrad, std::move(inputs), b.op().attrs,
                               b.GradName(0)));
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
      "attention(q [b,s,hq,dk], k [b,t,hkv,dk], v [b,t,hkv,dv]) {causal=1, scale, "
      "q_offset=0, k_offset=0} -> (out [b,s,hq,dv], lse [b,s,hq])")
      .Attr("q_offset", AttrRole::kOffset)
      .Attr("k_offset", AttrRole::kOffset)
      .Causal("s", "t")
      .SameComputation(SameAttention)
      .shard_attrs = ShardAttention;
  reg(OpKind::kAttentionGrad, InferAttentionGrad, SignatureAttentionGrad, KernelAttentionGrad,
      FlopsAttentionGrad, nullptr,
      "attention_grad(q, k, v, out, lse, dout, dlse?) {causal, scale, q_offset, k_offset} "
      "-> (dq, dk, dv)")
      .Homogeneous({5, 6}, 1)
      .Attr("q_offset", AttrRole::kOffset)
      .Attr("k_offset", AttrRole::kOffset)
      .Causal("s", "t")
      .SameComputation(SameAttention)
      .shard_attrs = ShardAttention;
  reg(OpKind::kAttentionMerge, InferAttentionMerge, SignatureAttentionMerge,
      KernelAttentionMerge, FlopsAttentionMerge, nullptr,
      "attention_merge(o1 [b,s,h,d], lse1 [b,s,h], o2, lse2) -> (o, lse): two partial "
      "softmaxes of the same queries merged");
  reg(OpKind::kRope, InferRope, SignatureRope, KernelRope, FlopsRope, GradRope,
      "rope(x [b,s,h,d]) {theta=10000, inverse=0, offset=0} -> x rotated by position "
      "(rotate-half)")
      .Homogeneous({0}, 1)
      .Attr("offset", AttrRole::kOffset)
      .shard_attrs = ShardRope;
}

}  // namespace loom::ir
