// Symbolic kernels of the loss family (reference kernels: ir/ops/loss.cc):
// cross_entropy, cross_entropy_grad, pick, pick_grad. Targets are integer-valued
// terms; reading the logit of target t is sum_v Indicator(t, v + vocab_begin) * x[v].

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

// The optional `vocab_begin` attribute; 0 when absent (the whole vocabulary).
absl::StatusOr<int64_t> VocabBegin(const ir::AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return 0;
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("vocab_begin"));
  if (begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab_begin' is ", begin, ", expected at least 0"));
  }
  return begin;
}

// The positions the loss averages over: attribute `count`, else the rows of the logits.
absl::StatusOr<int64_t> TokenCount(const ir::Shape& logits, const ir::AttrMap& attrs) {
  if (!attrs.Has("count")) return NumRows(logits);
  LOOM_ASSIGN_OR_RETURN(int64_t count, attrs.GetInt("count"));
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'count' is ", count, ", expected at least 1"));
  }
  return count;
}

// sum over positions of logsumexp(row) - row[target], divided by `count`.
Outputs SymCrossEntropy(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& logits = *in[0];
  const SymTensor& targets = *in[1];
  const int64_t v = LastDim(logits.shape);
  LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(logits.shape, attrs));
  if (v == 0) {
    return absl::InvalidArgumentError("input 0 has an empty vocabulary; no target is valid");
  }
  std::vector<TermId> losses;
  for (int64_t r = 0; r < static_cast<int64_t>(targets.data.size()); ++r) {
    std::vector<TermId> row = Slice(logits, r * v, v);
    losses.push_back(
        terms.Sub(LogSumExp(terms, row), Select(terms, targets.data[r], row, /*offset=*/0)));
  }
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  out[0].data[0] = terms.Mul(terms.Sum(losses), terms.Rational(1, count));
  return out;
}

// dlogits = (exp(row - logsumexp(row)) - onehot(target)) * dloss / count.
Outputs SymCrossEntropyGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs,
                            OutTypes out_types) {
  const SymTensor& logits = *in[0];
  const SymTensor& targets = *in[1];
  const SymTensor& dloss = *in[2];
  const int64_t v = LastDim(logits.shape);
  LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(logits.shape, attrs));
  const TermId scale = terms.Mul(dloss.data[0], terms.Rational(1, count));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (v == 0) return out;
  for (int64_t r = 0; r < static_cast<int64_t>(targets.data.size()); ++r) {
    std::vector<TermId> row = Slice(logits, r * v, v);
    const TermId lse = LogSumExp(terms, row);
    for (int64_t j = 0; j < v; ++j) {
      const TermId p = Exp(terms, terms.Sub(row[j], lse));
      const TermId onehot = terms.Indicator(targets.data[r], terms.Int(j));
      out[0].data[r * v + j] = terms.Mul(terms.Sub(p, onehot), scale);
    }
  }
  return out;
}

// x[..., target - vocab_begin] when the target falls in this piece, 0 otherwise.
Outputs SymPick(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const SymTensor& targets = *in[1];
  const int64_t v = LastDim(x.shape);
  LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t r = 0; r < static_cast<int64_t>(targets.data.size()); ++r) {
    out[0].data[r] = Select(terms, targets.data[r], Slice(x, r * v, v), begin);
  }
  return out;
}

// dx[..., target - vocab_begin] = dy[...] when in range, 0 elsewhere.
Outputs SymPickGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& targets = *in[0];
  const SymTensor& dy = *in[1];
  LOOM_ASSIGN_OR_RETURN(int64_t v, attrs.GetInt("vocab"));
  LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t r = 0; r < static_cast<int64_t>(targets.data.size()); ++r) {
    for (int64_t j = 0; j < v; ++j) {
      out[0].data[r * v + j] =
          terms.Mul(terms.Indicator(targets.data[r], terms.Int(j + begin)), dy.data[r]);
    }
  }
  return out;
}

}  // namespace

std::vector<SymKernel> LossSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kCrossEntropy, SymCrossEntropy>(),
      MakeSymKernel<OpKind::kCrossEntropyGrad, SymCrossEntropyGrad>(),
      MakeSymKernel<OpKind::kPick, SymPick>(),
      MakeSymKernel<OpKind::kPickGrad, SymPickGrad>(),
  };
}

}  // namespace loom::verify::internal
