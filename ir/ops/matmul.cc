// MatMul, linear and embedding.
// The contracted dim of each op is a reduction label: splitting it leaves partial sums.

#include <cmath>
#include <numeric>
#include <optional>

#include "ir/ops/element_index.h"
#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::DefaultSpatial;
using ops::DimLabels;
using ops::DimProduct;
using ops::ElementCount;
using ops::ExpectFloat;
using ops::ExpectInteger;
using ops::ExpectMinRank;
using ops::ExpectRank;
using ops::Like;
using ops::MatMulDims;
using ops::MatMulDimsOf;

// Inputs i and j have the same dtype.
absl::Status ExpectSameDType(absl::Span<const TensorType> in, int i, int j) {
  if (in[i].dtype != in[j].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input ", j, " has dtype ",
                                                   DTypeName(in[j].dtype), ", expected ",
                                                   DTypeName(in[i].dtype), " like input ", i));
  }
  return absl::OkStatus();
}

// The first `n` dims of inputs i and j agree.
absl::Status ExpectSameLeadingDims(absl::Span<const TensorType> in, int i, int j, int n) {
  for (int d = 0; d < n; ++d) {
    if (in[i].shape.dim(d) != in[j].shape.dim(d)) {
      return absl::InvalidArgumentError(absl::StrCat("input ", j, " has size ", in[j].shape.dim(d),
                                                     " at dim ", d, ", expected ",
                                                     in[i].shape.dim(d), " like input ", i));
    }
  }
  return absl::OkStatus();
}

// The optional `vocab_begin` attribute of embedding and embedding_grad: the id of
// the first table row a vocabulary piece holds (nullopt: the table is the whole
// vocabulary).
absl::StatusOr<std::optional<int64_t>> VocabBegin(const AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return std::nullopt;
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("vocab_begin"));
  if (begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab_begin' is ", begin, ", expected at least 0"));
  }
  return begin;
}

// The table row of each id for a table of `rows` rows. Without `vocab_begin` every id
// must lie in [0, rows) and names its row. With it the table holds ids
// [vocab_begin, vocab_begin + rows): those map to id - vocab_begin, every other id to
// -1 (no row here); ids must still be non-negative integers.
absl::StatusOr<std::vector<int64_t>> TableRows(const HostTensor& ids, int64_t rows,
                                               std::optional<int64_t> vocab_begin) {
  std::vector<int64_t> out;
  out.reserve(ids.size());
  for (int64_t p = 0; p < ids.size(); ++p) {
    double v = ids[p];
    if (!vocab_begin.has_value()) {
      if (!(v >= 0 && v < static_cast<double>(rows)) || v != std::floor(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("id ", v, " at position ", p, " is out of range [0, ", rows, ")"));
      }
      out.push_back(static_cast<int64_t>(v));
      continue;
    }
    if (!(v >= 0) || v != std::floor(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", v, " at position ", p, " is not a non-negative integer"));
    }
    const double local = v - static_cast<double>(*vocab_begin);
    out.push_back(local >= 0 && local < static_cast<double>(rows) ? static_cast<int64_t>(local)
                                                                  : -1);
  }
  return out;
}

// ---- shape rules ---------------------------------------------------------------

// a [..., m, k] @ b [..., k, n] (same batch dims) or b [k, n] -> [..., m, n].
absl::StatusOr<std::vector<TensorType>> InferMatMul(absl::Span<const TensorType> in,
                                                    const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 1));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 2));
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  const int rank = a.rank();
  if (b.rank() != 2 && b.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("input 1 has ", b.rank(), " dims, expected 2",
                                                   rank > 2 ? absl::StrCat(" or ", rank) : ""));
  }
  if (b.rank() == rank) LOOM_RETURN_IF_ERROR(ExpectSameLeadingDims(in, 0, 1, rank - 2));
  const int64_t k = a.dim(rank - 1);
  if (b.dim(b.rank() - 2) != k) {
    return absl::InvalidArgumentError(absl::StrCat("input 1 has size ", b.dim(b.rank() - 2),
                                                   " at dim ", b.rank() - 2, ", expected ", k,
                                                   " (the last dim of input 0)"));
  }
  std::vector<int64_t> dims = a.dims();
  dims.back() = b.dim(b.rank() - 1);
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

// x [..., in], w [out, in], optional bias [out] -> [..., out].
absl::StatusOr<std::vector<TensorType>> InferLinear(absl::Span<const TensorType> in,
                                                    const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 2));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, 2));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 1));
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  if (w.dim(1) != x.dim(x.rank() - 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 1 has ", w.dim(1), " input features, expected ", x.dim(x.rank() - 1),
                     " (the last dim of input 0)"));
  }
  if (in.size() == 3) {
    LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 2));
    LOOM_RETURN_IF_ERROR(ops::ExpectDims(in, 2, {w.dim(0)}));
  }
  std::vector<int64_t> dims = x.dims();
  dims.back() = w.dim(0);
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

// dy [..., out], x [..., in] -> [out, in].
absl::StatusOr<std::vector<TensorType>> InferLinearWGrad(absl::Span<const TensorType> in,
                                                         const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 1));
  LOOM_RETURN_IF_ERROR(ExpectMinRank(in, 0, 2));
  const int rank = in[0].shape.rank();
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, rank));
  LOOM_RETURN_IF_ERROR(ExpectSameLeadingDims(in, 0, 1, rank - 1));
  return std::vector<TensorType>{
      Like(in[0], {in[0].shape.dim(rank - 1), in[1].shape.dim(rank - 1)})};
}

// ids [...] (integer), table [V, d] {vocab_begin?} -> [..., d].
absl::StatusOr<std::vector<TensorType>> InferEmbedding(absl::Span<const TensorType> in,
                                                       const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(VocabBegin(attrs).status());
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, 2));
  std::vector<int64_t> dims = in[0].shape.dims();
  dims.push_back(in[1].shape.dim(1));
  return std::vector<TensorType>{Like(in[1], std::move(dims))};
}

// ids [...] (integer), dy [..., d] {vocab, vocab_begin?} -> [vocab, d].
absl::StatusOr<std::vector<TensorType>> InferEmbeddingGrad(absl::Span<const TensorType> in,
                                                           const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(VocabBegin(attrs).status());
  LOOM_RETURN_IF_ERROR(ExpectInteger(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  const int rank = in[0].shape.rank();
  LOOM_RETURN_IF_ERROR(ExpectRank(in, 1, rank + 1));
  LOOM_RETURN_IF_ERROR(ExpectSameLeadingDims(in, 0, 1, rank));
  LOOM_ASSIGN_OR_RETURN(int64_t vocab, attrs.GetInt("vocab"));
  if (vocab < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab' is ", vocab, ", expected at least 1"));
  }
  return std::vector<TensorType>{Like(in[1], {vocab, in[1].shape.dim(rank)})};
}

// ---- signatures ----------------------------------------------------------------

// Labels "b0 b1 ..." for the leading dims, then `tail`.
std::vector<std::string> Leading(int n, std::vector<std::string> tail) {
  std::vector<std::string> labels = DimLabels(n, "b");
  labels.insert(labels.end(), tail.begin(), tail.end());
  return labels;
}

// "b0.. m k, b0.. k n -> b0.. m n | k:reduce" (rhs "k n" when rank 2).
absl::StatusOr<DimSignature> SignatureMatMul(absl::Span<const TensorType> in, const AttrMap&) {
  const int batch = in[0].shape.rank() - 2;
  DimSignature sig;
  sig.inputs.push_back(Leading(batch, {"m", "k"}));
  sig.inputs.push_back(in[1].shape.rank() == 2 ? std::vector<std::string>{"k", "n"}
                                               : Leading(batch, {"k", "n"}));
  sig.outputs.push_back(Leading(batch, {"m", "n"}));
  sig.kinds["k"] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// "b0.. i, o i[, o] -> b0.. o | i:reduce".
absl::StatusOr<DimSignature> SignatureLinear(absl::Span<const TensorType> in, const AttrMap&) {
  const int lead = in[0].shape.rank() - 1;
  DimSignature sig;
  sig.inputs.push_back(Leading(lead, {"i"}));
  sig.inputs.push_back({"o", "i"});
  if (in.size() == 3) {
    sig.inputs.push_back({"o"});
    sig.additive_inputs = {2};  // the bias is added once, outside the sum over i
  }
  sig.outputs.push_back(Leading(lead, {"o"}));
  sig.kinds["i"] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// "b0.. o, b0.. i -> o i", every leading label a reduction.
absl::StatusOr<DimSignature> SignatureLinearWGrad(absl::Span<const TensorType> in, const AttrMap&) {
  const int lead = in[0].shape.rank() - 1;
  DimSignature sig;
  sig.inputs.push_back(Leading(lead, {"o"}));
  sig.inputs.push_back(Leading(lead, {"i"}));
  sig.outputs.push_back({"o", "i"});
  for (const auto& l : DimLabels(lead, "b")) sig.kinds[l] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// "b0.., v d -> b0.. d | v:reduce": a vocab piece (vocab_begin set by
// ShardAttrsEmbedding) gathers the rows it holds and contributes zero rows for the
// other ids, so the pieces sum to the full lookup.
absl::StatusOr<DimSignature> SignatureEmbedding(absl::Span<const TensorType> in, const AttrMap&) {
  const int lead = in[0].shape.rank();
  DimSignature sig;
  sig.inputs.push_back(Leading(lead, {}));
  sig.inputs.push_back({"v", "d"});
  sig.outputs.push_back(Leading(lead, {"d"}));
  sig.kinds["v"] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// "b0.., b0.. d -> v d": positions are summed away; a vocab piece (vocab_begin set by
// ShardAttrsEmbeddingGrad) keeps its rows and drops the other ids.
absl::StatusOr<DimSignature> SignatureEmbeddingGrad(absl::Span<const TensorType> in,
                                                    const AttrMap&) {
  const int lead = in[0].shape.rank();
  DimSignature sig;
  sig.inputs.push_back(Leading(lead, {}));
  sig.inputs.push_back(Leading(lead, {"d"}));
  sig.outputs.push_back({"v", "d"});
  for (const auto& l : DimLabels(lead, "b")) sig.kinds[l] = DimKind::kReduction;
  DefaultSpatial(sig);
  return sig;
}

// ---- FLOPs -------------------------------------------------------------------------

double FlopsMatMul(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                   const AttrMap&) {
  const Shape& a = in[0].shape;
  return 2.0 * ElementCount(out[0]) * static_cast<double>(a.dim(a.rank() - 1));
}

double FlopsLinear(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                   const AttrMap&) {
  const Shape& x = in[0].shape;
  double flops = 2.0 * ElementCount(out[0]) * static_cast<double>(x.dim(x.rank() - 1));
  if (in.size() == 3) flops += ElementCount(out[0]);
  return flops;
}

double FlopsLinearWGrad(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                        const AttrMap&) {
  const Shape& dy = in[0].shape;
  return 2.0 * ElementCount(in[0]) * static_cast<double>(in[1].shape.dim(dy.rank() - 1));
}

double FlopsEmbedding(absl::Span<const TensorType>, absl::Span<const TensorType>, const AttrMap&) {
  return 0.0;  // a gather
}

double FlopsEmbeddingGrad(absl::Span<const TensorType> in, absl::Span<const TensorType>,
                          const AttrMap&) {
  return ElementCount(in[1]);  // one add per scattered element
}

// ---- kernels -------------------------------------------------------------------

absl::Status KernelMatMul(absl::Span<const HostTensor* const> in, const AttrMap&,
                          absl::Span<HostTensor> out) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  const MatMulDims d = MatMulDimsOf(a.shape, b.shape);
  const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
  for (int64_t p = 0; p < batch; ++p) {
    const int64_t a0 = p * m * k;
    const int64_t b0 = d.b_offset(p);
    const int64_t y0 = p * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l) acc += a[a0 + i * k + l] * b[b0 + l * n + j];
        out[0][y0 + i * n + j] = acc;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KernelLinear(absl::Span<const HostTensor* const> in, const AttrMap&,
                          absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const HostTensor& w = *in[1];
  const int64_t rows = DimProduct(x.shape, 0, x.shape.rank() - 1);
  const int64_t n_out = w.shape.dim(0);
  const int64_t n_in = w.shape.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = in.size() == 3 ? (*in[2])[o] : 0.0;
      for (int64_t i = 0; i < n_in; ++i) acc += x[r * n_in + i] * w[o * n_in + i];
      out[0][r * n_out + o] = acc;
    }
  }
  return absl::OkStatus();
}

absl::Status KernelLinearWGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                               absl::Span<HostTensor> out) {
  const HostTensor& dy = *in[0];
  const HostTensor& x = *in[1];
  const int rank = dy.shape.rank();
  const int64_t rows = DimProduct(dy.shape, 0, rank - 1);
  const int64_t n_out = dy.shape.dim(rank - 1);
  const int64_t n_in = x.shape.dim(rank - 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      for (int64_t i = 0; i < n_in; ++i) {
        out[0][o * n_in + i] += dy[r * n_out + o] * x[r * n_in + i];
      }
    }
  }
  return absl::OkStatus();
}

// Rows of ids outside a vocab piece stay zero.
absl::Status KernelEmbedding(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                             absl::Span<HostTensor> out) {
  const HostTensor& table = *in[1];
  const int64_t d = table.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab_begin, VocabBegin(attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                        TableRows(*in[0], table.shape.dim(0), vocab_begin));
  for (size_t p = 0; p < rows.size(); ++p) {
    if (rows[p] < 0) continue;
    for (int64_t j = 0; j < d; ++j) out[0][p * d + j] = table[rows[p] * d + j];
  }
  return absl::OkStatus();
}

// Ids outside a vocab piece add nothing.
absl::Status KernelEmbeddingGrad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                 absl::Span<HostTensor> out) {
  const HostTensor& dy = *in[1];
  const int64_t d = out[0].shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab_begin, VocabBegin(attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows,
                        TableRows(*in[0], out[0].shape.dim(0), vocab_begin));
  for (size_t p = 0; p < rows.size(); ++p) {
    if (rows[p] < 0) continue;
    for (int64_t j = 0; j < d; ++j) out[0][rows[p] * d + j] += dy[p * d + j];
  }
  return absl::OkStatus();
}

// ---- pieces --------------------------------------------------------------------

// The rows [begin, end) of a piece along the vocab dim of a [V, d] box, or nullopt
// when they are the whole vocabulary.
absl::StatusOr<std::optional<Interval>> VocabRange(const TensorType& logical,
                                                   absl::Span<const Box> boxes, int i,
                                                   absl::string_view what) {
  if (static_cast<int>(boxes.size()) <= i || boxes[i].size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedding piece needs a 2-dim box for ", what, " ", i));
  }
  const Interval rows = boxes[i][0];
  if (rows.begin == 0 && rows.end == logical.shape.dim(0)) return std::nullopt;
  return rows;
}

// A piece holding table rows [b, e) of the logical table gets vocab_begin b (offset
// by the op's own vocab_begin, if any).
absl::StatusOr<AttrMap> ShardAttrsEmbedding(const AttrMap& attrs, absl::Span<const TensorType> in,
                                            absl::Span<const Box> in_boxes,
                                            absl::Span<const TensorType>, absl::Span<const Box>) {
  LOOM_ASSIGN_OR_RETURN(std::optional<Interval> rows, VocabRange(in[1], in_boxes, 1, "input"));
  if (!rows.has_value()) return attrs;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> base, VocabBegin(attrs));
  AttrMap piece = attrs;
  piece.Set("vocab_begin", base.value_or(0) + rows->begin);
  return piece;
}

// A piece writing rows [b, e) of dtable gets vocab_begin b and vocab e - b.
absl::StatusOr<AttrMap> ShardAttrsEmbeddingGrad(const AttrMap& attrs, absl::Span<const TensorType>,
                                                absl::Span<const Box>,
                                                absl::Span<const TensorType> out,
                                                absl::Span<const Box> out_boxes) {
  LOOM_ASSIGN_OR_RETURN(std::optional<Interval> rows, VocabRange(out[0], out_boxes, 0, "output"));
  if (!rows.has_value()) return attrs;
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> base, VocabBegin(attrs));
  AttrMap piece = attrs;
  piece.Set("vocab_begin", base.value_or(0) + rows->begin);
  piece.Set("vocab", rows->size());
  return piece;
}

// ---- gradient rules ------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// transpose(x) exchanging its last two dims.
absl::StatusOr<TensorId> SwapLastTwo(GradBuilder& b, TensorId x, absl::string_view name) {
  const int rank = b.graph().tensor(x).shape.rank();
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[rank - 2], perm[rank - 1]);
  return b.Emit1(OpKind::kTranspose, {x}, {{"perm", perm}}, name);
}

// y = a b: da = dy b^T, db = a^T dy (summed over the batch when b is broadcast).
Grads GradMatMul(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId bt, SwapLastTwo(b, b.input(1), "matmul_rhs_t"));
  LOOM_ASSIGN_OR_RETURN(TensorId da, b.Emit1(OpKind::kMatMul, {dy, bt}, {}, b.GradName(0)));
  const Shape a = b.input_type(0).shape;
  const int rank = a.rank();
  TensorId lhs = b.input(0);
  TensorId rhs = dy;
  if (b.input_type(1).shape.rank() == 2 && rank > 2) {
    // b is shared by every batch entry: fold the batch into the rows.
    const int64_t rows = DimProduct(a, 0, rank - 1);
    const int64_t n = b.input_type(1).shape.dim(1);
    LOOM_ASSIGN_OR_RETURN(
        lhs, b.Emit1(OpKind::kReshape, {lhs},
                     {{"shape", std::vector<int64_t>{rows, a.dim(rank - 1)}}}, "matmul_lhs_rows"));
    LOOM_ASSIGN_OR_RETURN(
        rhs, b.Emit1(OpKind::kReshape, {rhs}, {{"shape", std::vector<int64_t>{rows, n}}},
                     "matmul_dy_rows"));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId at, SwapLastTwo(b, lhs, "matmul_lhs_t"));
  LOOM_ASSIGN_OR_RETURN(TensorId db, b.Emit1(OpKind::kMatMul, {at, rhs}, {}, b.GradName(1)));
  return std::vector<std::optional<TensorId>>{da, db};
}

// y = x w^T + bias: dx = dy w, dw = sum_n dy^T x, dbias = dy summed over leading dims.
Grads GradLinear(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMatMul, {dy, b.input(1)}, {}, b.GradName(0)));
  LOOM_ASSIGN_OR_RETURN(TensorId dw,
                        b.Emit1(OpKind::kLinearWGrad, {dy, b.input(0)}, {}, b.GradName(1)));
  std::vector<std::optional<TensorId>> grads = {dx, dw};
  if (b.op().inputs.size() == 3) {
    std::vector<int64_t> dims(b.input_type(0).shape.rank() - 1);
    std::iota(dims.begin(), dims.end(), 0);
    LOOM_ASSIGN_OR_RETURN(TensorId dbias,
                          b.Emit1(OpKind::kSum, {dy}, {{"dims", dims}}, b.GradName(2)));
    grads.push_back(dbias);
  }
  return grads;
}

// dtable = embedding_grad over the same rows (and the same vocab_begin, if any).
Grads GradEmbedding(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  AttrMap attrs{{"vocab", b.input_type(1).shape.dim(0)}};
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab_begin, VocabBegin(b.op().attrs));
  if (vocab_begin.has_value()) attrs.Set("vocab_begin", *vocab_begin);
  LOOM_ASSIGN_OR_RETURN(TensorId dtable, b.Emit1(OpKind::kEmbeddingGrad, {b.input(0), dy},
                                                 std::move(attrs), b.GradName(1)));
  return std::vector<std::optional<TensorId>>{std::nullopt, dtable};
}

}  // namespace

void RegisterMatMulOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc, ShardAttrsFn shard_attrs = nullptr) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc, shard_attrs});
  };
  reg(OpKind::kEmbedding, InferEmbedding, SignatureEmbedding, KernelEmbedding, FlopsEmbedding,
      GradEmbedding,
      "embedding(ids [...], table [V, d]) {vocab_begin?} -> rows of table [..., d]; with "
      "vocab_begin the table holds ids [vocab_begin, vocab_begin + V), other ids give zero rows",
      ShardAttrsEmbedding)
      .Linear({{1}})
      .Attr("vocab_begin", AttrRole::kOffset);
  reg(OpKind::kEmbeddingGrad, InferEmbeddingGrad, SignatureEmbeddingGrad, KernelEmbeddingGrad,
      FlopsEmbeddingGrad, nullptr,
      "embedding_grad(ids [...], dy [..., d]) {vocab, vocab_begin?} -> dtable [vocab, d], "
      "scatter-add; with vocab_begin only ids in [vocab_begin, vocab_begin + vocab) add",
      ShardAttrsEmbeddingGrad)
      .Linear({{1}})
      .Attr("vocab_begin", AttrRole::kOffset)
      .Resizes(ops::ResizeVocab);
  reg(OpKind::kLinear, InferLinear, SignatureLinear, KernelLinear, FlopsLinear, GradLinear,
      "linear(x [..., in], w [out, in], bias [out]?) -> x w^T + bias [..., out]")
      .Linear({{0, 2}, {1, 2}});
  reg(OpKind::kLinearWGrad, InferLinearWGrad, SignatureLinearWGrad, KernelLinearWGrad,
      FlopsLinearWGrad, nullptr,
      "linear_wgrad(dy [..., out], x [..., in]) -> dw [out, in], summed over positions")
      .Linear({{0}, {1}});
  reg(OpKind::kMatMul, InferMatMul, SignatureMatMul, KernelMatMul, FlopsMatMul, GradMatMul,
      "matmul(a [..., m, k], b [..., k, n] or [k, n]) -> a @ b [..., m, n]")
      .Linear({{0}, {1}});
}

}  // namespace loom::ir
