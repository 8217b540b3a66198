// Symbolic kernels of the MoE family (reference kernels: ir/ops/moe.cc): topk_gate,
// topk_gate_grad, moe_dispatch, moe_dispatch_grad, moe_combine, moe_combine_grad.
//
// Expert indices are integer-valued terms. The slot rule of the reference kernels
// (in each group of T/G tokens, walk the (token, j) pairs in order; a pair routed to
// expert e takes the group's next slot of e while fewer than C are taken) is written
// arithmetically: the pair p of a group lands in slot s of expert e exactly when
//   Indicator(index_p, e) * Indicator(rank_p, s),  s < C,
// with rank_p = sum over the group's earlier pairs q of Indicator(index_q, index_p)
// (the slots of e taken before p). A pair with rank_p >= C matches no slot: dropped.
//
// topk_gate's selection (a stable descending sort of the scores) is the
// uninterpreted integer-valued function topk_index(j, scores...).

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

// ---- gate ---------------------------------------------------------------------

struct GateAttrs {
  int64_t k = 1;
  bool softmax = true;
  bool normalize = false;
};

absl::StatusOr<GateAttrs> ParseGateAttrs(const ir::AttrMap& attrs, int64_t experts) {
  GateAttrs g;
  LOOM_ASSIGN_OR_RETURN(g.k, attrs.GetInt("k"));
  if (g.k < 1 || g.k > experts) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'k' is ", g.k, ", expected 1 to ",
                                                   experts, " (the experts of input 0)"));
  }
  LOOM_ASSIGN_OR_RETURN(std::string score, attrs.GetString("score", "softmax"));
  if (score != "softmax" && score != "sigmoid") {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'score' is \"", score, "\", expected \"softmax\" or \"sigmoid\""));
  }
  g.softmax = score == "softmax";
  LOOM_ASSIGN_OR_RETURN(g.normalize, FlagAttr(attrs, "normalize", 0));
  return g;
}

// Scores of row t of [T, E] logits: softmax over the row, or 1 / (1 + exp(-x)).
std::vector<TermId> RowScores(smt::Terms& terms, const SymTensor& logits, int64_t t, bool softmax) {
  const int64_t experts = logits.shape.dim(1);
  std::vector<TermId> row = Slice(logits, t * experts, experts);
  if (softmax) return Softmax(terms, row);
  for (TermId& x : row) x = terms.Inv(terms.Add(terms.One(), Exp(terms, terms.Neg(x))));
  return row;
}

// The expert at position j of the descending order of `scores`.
TermId TopKIndex(smt::Terms& terms, int64_t j, absl::Span<const TermId> scores) {
  if (scores.size() == 1) return terms.Zero();
  std::vector<TermId> args{terms.Int(j)};
  args.insert(args.end(), scores.begin(), scores.end());
  return terms.Fn(kTopKIndexFn, args);
}

// (weights [T, k], indices [T, k]): the k best scores of each row, optionally
// divided by their sum, and their experts.
Outputs SymTopKGate(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& logits = *in[0];
  const int64_t tokens = logits.shape.dim(0);
  const int64_t experts = logits.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, experts));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<TermId> s = RowScores(terms, logits, t, g.softmax);
    std::vector<TermId> chosen;
    for (int64_t j = 0; j < g.k; ++j) {
      const TermId index = TopKIndex(terms, j, s);
      out[1].data[t * g.k + j] = index;
      chosen.push_back(Select(terms, index, s));
    }
    const TermId inv_sum = g.normalize ? terms.Inv(terms.Sum(chosen)) : terms.One();
    for (int64_t j = 0; j < g.k; ++j) out[0].data[t * g.k + j] = terms.Mul(chosen[j], inv_sum);
  }
  return out;
}

// The selection is held fixed. With w_j = s[i_j] / Z, Z = sum_l s[i_l]:
// ds[i_j] += (dw_j - sum_l dw_l w_l) / Z (just dw_j without normalisation); then
// softmax: dlogit = s * (ds - <ds, s>), sigmoid: dlogit = ds * s * (1 - s).
Outputs SymTopKGateGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& logits = *in[0];
  const SymTensor& indices = *in[1];
  const SymTensor& dw = *in[2];
  const int64_t tokens = logits.shape.dim(0);
  const int64_t experts = logits.shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(GateAttrs g, ParseGateAttrs(attrs, experts));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<TermId> s = RowScores(terms, logits, t, g.softmax);
    const int64_t row = t * g.k;
    std::vector<TermId> chosen, weighted;
    for (int64_t j = 0; j < g.k; ++j) {
      chosen.push_back(Select(terms, indices.data[row + j], s));
      weighted.push_back(terms.Mul(dw.data[row + j], chosen.back()));
    }
    const TermId inv_z = terms.Inv(terms.Sum(chosen));
    const TermId dot = terms.Sum(weighted);
    std::vector<TermId> ds(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<TermId> parts;
      for (int64_t j = 0; j < g.k; ++j) {
        const TermId grad =
            g.normalize ? terms.Mul(terms.Sub(dw.data[row + j], terms.Mul(dot, inv_z)), inv_z)
                        : dw.data[row + j];
        parts.push_back(terms.Mul(terms.Indicator(indices.data[row + j], terms.Int(e)), grad));
      }
      ds[e] = terms.Sum(parts);
    }
    std::vector<TermId> products;
    for (int64_t e = 0; e < experts; ++e) products.push_back(terms.Mul(ds[e], s[e]));
    const TermId inner = terms.Sum(products);
    for (int64_t e = 0; e < experts; ++e) {
      out[0].data[t * experts + e] =
          g.softmax ? terms.Mul(s[e], terms.Sub(ds[e], inner))
                    : terms.Product({ds[e], s[e], terms.Sub(terms.One(), s[e])});
    }
  }
  return out;
}

// ---- routing ------------------------------------------------------------------

absl::StatusOr<int64_t> GroupsAttr(const ir::AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t groups, attrs.GetInt("groups", 1));
  if (groups < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'groups' is ", groups, ", expected at least 1"));
  }
  return groups;
}

// The slot rule over [T, k] indices for an expert tensor [E, G*C, d].
class Routing {
 public:
  // `slots` is the shape of the expert tensor.
  static absl::StatusOr<Routing> Make(smt::Terms& terms, const ir::Shape& slots,
                                      const SymTensor& indices, const ir::AttrMap& attrs) {
    LOOM_ASSIGN_OR_RETURN(int64_t groups, GroupsAttr(attrs));
    Routing r(terms, indices);
    r.experts_ = slots.dim(0);
    r.capacity_ = slots.dim(1) / groups;
    r.k_ = indices.shape.dim(1);
    const int64_t pairs = static_cast<int64_t>(indices.data.size());
    r.group_pairs_ = pairs == 0 ? 1 : indices.shape.dim(0) / groups * r.k_;
    if (r.group_pairs_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'groups' is ", groups, ", more than the tokens of the indices"));
    }
    r.rank_.resize(static_cast<size_t>(pairs));
    for (int64_t p = 0; p < pairs; ++p) {
      std::vector<TermId> earlier;
      for (int64_t q = p - p % r.group_pairs_; q < p; ++q) {
        earlier.push_back(terms.Indicator(indices.data[q], indices.data[p]));
      }
      r.rank_[p] = terms.Sum(earlier);
    }
    return r;
  }

  int64_t pairs() const { return static_cast<int64_t>(rank_.size()); }
  int64_t experts() const { return experts_; }
  int64_t capacity() const { return capacity_; }
  // The token of pair p.
  int64_t token(int64_t p) const { return p / k_; }
  // The first slot column of the group of pair p.
  int64_t group_column(int64_t p) const { return p / group_pairs_ * capacity_; }
  // 1 when pair p sits in slot s (< capacity) of expert e, else 0.
  TermId Sel(int64_t p, int64_t e, int64_t s) const {
    return terms_->Mul(terms_->Indicator(indices_->data[p], terms_->Int(e)),
                       terms_->Indicator(rank_[p], terms_->Int(s)));
  }

 private:
  Routing(smt::Terms& terms, const SymTensor& indices) : terms_(&terms), indices_(&indices) {}

  smt::Terms* terms_;
  const SymTensor* indices_;
  int64_t experts_ = 0;
  int64_t capacity_ = 0;
  int64_t k_ = 1;
  int64_t group_pairs_ = 1;
  std::vector<TermId> rank_;
};

// Offset of slot column `column` of expert e in an [E, columns, d] tensor.
int64_t SlotOffset(int64_t e, int64_t column, int64_t columns, int64_t d) {
  return (e * columns + column) * d;
}

// Expert slot [e, g*C + s] holds the row of the group's pair routed there.
Outputs SymDispatch(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int64_t d = x.shape.dim(1);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  const int64_t columns = out[0].shape.dim(1);
  LOOM_ASSIGN_OR_RETURN(Routing r, Routing::Make(terms, out[0].shape, *in[1], attrs));
  std::vector<std::vector<TermId>> parts(out[0].data.size());
  for (int64_t p = 0; p < r.pairs(); ++p) {
    for (int64_t e = 0; e < r.experts(); ++e) {
      for (int64_t s = 0; s < r.capacity(); ++s) {
        const TermId sel = r.Sel(p, e, s);
        const int64_t dst = SlotOffset(e, r.group_column(p) + s, columns, d);
        for (int64_t i = 0; i < d; ++i) {
          parts[dst + i].push_back(terms.Mul(sel, x.data[r.token(p) * d + i]));
        }
      }
    }
  }
  for (size_t o = 0; o < parts.size(); ++o) out[0].data[o] = terms.Sum(parts[o]);
  return out;
}

// dx[t] = sum over t's kept pairs of dy at their slots.
Outputs SymDispatchGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& dy = *in[0];
  const int64_t columns = dy.shape.dim(1);
  const int64_t d = dy.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, Routing::Make(terms, dy.shape, *in[1], attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  std::vector<std::vector<TermId>> parts(out[0].data.size());
  for (int64_t p = 0; p < r.pairs(); ++p) {
    for (int64_t e = 0; e < r.experts(); ++e) {
      for (int64_t s = 0; s < r.capacity(); ++s) {
        const TermId sel = r.Sel(p, e, s);
        const int64_t src = SlotOffset(e, r.group_column(p) + s, columns, d);
        for (int64_t i = 0; i < d; ++i) {
          parts[r.token(p) * d + i].push_back(terms.Mul(sel, dy.data[src + i]));
        }
      }
    }
  }
  for (size_t o = 0; o < parts.size(); ++o) out[0].data[o] = terms.Sum(parts[o]);
  return out;
}

// y[t] = sum over t's kept pairs p of weights[p] * expert_out at p's slot.
Outputs SymCombine(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& eo = *in[0];
  const SymTensor& w = *in[1];
  const int64_t columns = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, Routing::Make(terms, eo.shape, *in[2], attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  std::vector<std::vector<TermId>> parts(out[0].data.size());
  for (int64_t p = 0; p < r.pairs(); ++p) {
    for (int64_t e = 0; e < r.experts(); ++e) {
      for (int64_t s = 0; s < r.capacity(); ++s) {
        const TermId sel = terms.Mul(r.Sel(p, e, s), w.data[p]);
        const int64_t src = SlotOffset(e, r.group_column(p) + s, columns, d);
        for (int64_t i = 0; i < d; ++i) {
          parts[r.token(p) * d + i].push_back(terms.Mul(sel, eo.data[src + i]));
        }
      }
    }
  }
  for (size_t o = 0; o < parts.size(); ++o) out[0].data[o] = terms.Sum(parts[o]);
  return out;
}

// d_expert_out at p's slot += weights[p] * dy[t]; d_weights[p] = <expert_out at p's
// slot, dy[t]>.
Outputs SymCombineGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& eo = *in[0];
  const SymTensor& w = *in[1];
  const SymTensor& dy = *in[3];
  const int64_t columns = eo.shape.dim(1);
  const int64_t d = eo.shape.dim(2);
  LOOM_ASSIGN_OR_RETURN(Routing r, Routing::Make(terms, eo.shape, *in[2], attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  std::vector<std::vector<TermId>> deo(out[0].data.size());
  for (int64_t p = 0; p < r.pairs(); ++p) {
    const int64_t row = r.token(p) * d;
    std::vector<TermId> dweight;
    for (int64_t e = 0; e < r.experts(); ++e) {
      for (int64_t s = 0; s < r.capacity(); ++s) {
        const TermId sel = r.Sel(p, e, s);
        const TermId weighted = terms.Mul(sel, w.data[p]);
        const int64_t slot = SlotOffset(e, r.group_column(p) + s, columns, d);
        for (int64_t i = 0; i < d; ++i) {
          deo[slot + i].push_back(terms.Mul(weighted, dy.data[row + i]));
          dweight.push_back(terms.Product({sel, eo.data[slot + i], dy.data[row + i]}));
        }
      }
    }
    out[1].data[p] = terms.Sum(dweight);
  }
  for (size_t o = 0; o < deo.size(); ++o) out[0].data[o] = terms.Sum(deo[o]);
  return out;
}

}  // namespace

std::vector<SymKernel> MoeSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kMoeCombine, SymCombine>(),
      MakeSymKernel<OpKind::kMoeCombineGrad, SymCombineGrad>(),
      MakeSymKernel<OpKind::kMoeDispatch, SymDispatch>(),
      MakeSymKernel<OpKind::kMoeDispatchGrad, SymDispatchGrad>(),
      MakeSymKernel<OpKind::kTopKGate, SymTopKGate>(),
      MakeSymKernel<OpKind::kTopKGateGrad, SymTopKGateGrad>(),
  };
}

}  // namespace loom::verify::internal
