// Symbolic kernels of the matmul family (reference kernels: ir/ops/matmul.cc).
//
// Contractions are sums of products over the contracted index. Embedding lookups
// take the token ids as terms: row `ids[p]` of the table is
// sum_v Indicator(ids[p], v + vocab_begin) * table[v], so an id outside the rows
// a (vocabulary piece of a) table holds selects nothing and gives a zero row, as
// in the reference kernel.

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops/element_index.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_elements.h"

namespace loom::verify::internal {
namespace {

// a [..., m, k] @ b [..., k, n] (same batch dims) or b [k, n] -> [..., m, n].
Outputs MatMul(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& a = *in[0];
  const SymTensor& b = *in[1];
  const ir::ops::MatMulDims d = ir::ops::MatMulDimsOf(a.shape, b.shape);
  const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
  SymTensor y = FilledLike(out_types[0], t.Zero());
  std::vector<TermId> products(k);
  for (int64_t p = 0; p < batch; ++p) {
    const int64_t a0 = p * m * k;
    const int64_t b0 = d.b_offset(p);
    const int64_t y0 = p * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t l = 0; l < k; ++l) {
          products[l] = t.Mul(a.data[a0 + i * k + l], b.data[b0 + l * n + j]);
        }
        y.data[y0 + i * n + j] = t.Sum(products);
      }
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// x [..., in] w^T + bias: y[r, o] = bias[o] + sum_i x[r, i] w[o, i].
Outputs Linear(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const SymTensor& w = *in[1];
  const bool has_bias = in.size() == 3;
  const int64_t rows = ir::ops::DimProduct(x.shape, 0, x.shape.rank() - 1);
  const int64_t n_out = w.shape.dim(0);
  const int64_t n_in = w.shape.dim(1);
  SymTensor y = FilledLike(out_types[0], t.Zero());
  std::vector<TermId> parts;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      parts.clear();
      if (has_bias) parts.push_back(in[2]->data[o]);
      for (int64_t i = 0; i < n_in; ++i) {
        parts.push_back(t.Mul(x.data[r * n_in + i], w.data[o * n_in + i]));
      }
      y.data[r * n_out + o] = t.Sum(parts);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// dw[o, i] = sum over leading positions r of dy[r, o] x[r, i].
Outputs LinearWGrad(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& dy = *in[0];
  const SymTensor& x = *in[1];
  const int rank = dy.shape.rank();
  const int64_t rows = ir::ops::DimProduct(dy.shape, 0, rank - 1);
  const int64_t n_out = dy.shape.dim(rank - 1);
  const int64_t n_in = x.shape.dim(rank - 1);
  SymTensor y = FilledLike(out_types[0], t.Zero());
  std::vector<TermId> products(rows);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t i = 0; i < n_in; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        products[r] = t.Mul(dy.data[r * n_out + o], x.data[r * n_in + i]);
      }
      y.data[o * n_in + i] = t.Sum(products);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// The optional `vocab_begin` attribute: the id held by table row 0 (0 without it).
absl::StatusOr<int64_t> VocabBegin(absl::string_view op, const ir::AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return 0;
  absl::StatusOr<int64_t> begin = attrs.GetInt("vocab_begin");
  if (!begin.ok()) return OpError(op, begin.status());
  if (*begin < 0) {
    return absl::InvalidArgumentError(absl::StrCat("op '", op, "': attribute 'vocab_begin' is ",
                                                   *begin, ", expected at least 0"));
  }
  return *begin;
}

// sel[p][v] = Indicator(ids[p], v + vocab_begin): 1 when position p's id is the
// one table row v holds.
std::vector<std::vector<TermId>> RowSelectors(Terms& t, const SymTensor& ids, int64_t rows,
                                              int64_t vocab_begin) {
  std::vector<std::vector<TermId>> sel(ids.data.size(), std::vector<TermId>(rows));
  for (size_t p = 0; p < ids.data.size(); ++p) {
    for (int64_t v = 0; v < rows; ++v) sel[p][v] = t.Indicator(ids.data[p], t.Int(v + vocab_begin));
  }
  return sel;
}

// ids [...], table [V, d] -> y[p, j] = sum_v [ids[p] = v + vocab_begin] table[v, j].
Outputs Embedding(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& ids = *in[0];
  const SymTensor& table = *in[1];
  LOOM_ASSIGN_OR_RETURN(int64_t vocab_begin, VocabBegin("embedding", attrs));
  const int64_t rows = table.shape.dim(0);
  const int64_t d = table.shape.dim(1);
  const std::vector<std::vector<TermId>> sel = RowSelectors(t, ids, rows, vocab_begin);
  SymTensor y = FilledLike(out_types[0], t.Zero());
  std::vector<TermId> parts(rows);
  for (size_t p = 0; p < ids.data.size(); ++p) {
    for (int64_t j = 0; j < d; ++j) {
      for (int64_t v = 0; v < rows; ++v) parts[v] = t.Mul(sel[p][v], table.data[v * d + j]);
      y.data[p * d + j] = t.Sum(parts);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// ids [...], dy [..., d] -> dtable[v, j] = sum_p [ids[p] = v + vocab_begin] dy[p, j].
Outputs EmbeddingGrad(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& ids = *in[0];
  const SymTensor& dy = *in[1];
  LOOM_ASSIGN_OR_RETURN(int64_t vocab_begin, VocabBegin("embedding_grad", attrs));
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const int64_t rows = y.shape.dim(0);
  const int64_t d = y.shape.dim(1);
  const std::vector<std::vector<TermId>> sel = RowSelectors(t, ids, rows, vocab_begin);
  std::vector<TermId> parts(ids.data.size());
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < d; ++j) {
      for (size_t p = 0; p < ids.data.size(); ++p) parts[p] = t.Mul(sel[p][v], dy.data[p * d + j]);
      y.data[v * d + j] = t.Sum(parts);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

}  // namespace

std::vector<SymKernel> MatmulSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kEmbedding, Embedding}, {OpKind::kEmbeddingGrad, EmbeddingGrad},
      {OpKind::kLinear, Linear},       {OpKind::kLinearWGrad, LinearWGrad},
      {OpKind::kMatMul, MatMul},
  };
}

}  // namespace loom::verify::internal
