// Symbolic kernels of the reduce family (reference kernels: ir/ops/reduce.cc):
// sum, mean, max, max_grad, sum_squares, softmax, log_softmax and their gradients.

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops/element_index.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

using ir::ops::AxisAttr;
using ir::ops::AxisView;
using ir::ops::ProjectIndices;
using ir::ops::ReducedDims;
using ir::ops::ViewAround;

// The terms summed into each output element of a reduction over `reduced`.
std::vector<std::vector<TermId>> GatherReduced(const SymTensor& a, const std::vector<bool>& reduced,
                                               int64_t outputs) {
  std::vector<int64_t> index = ProjectIndices(a.shape, reduced);
  std::vector<std::vector<TermId>> parts(static_cast<size_t>(outputs));
  for (size_t i = 0; i < index.size(); ++i) parts[index[i]].push_back(a.data[i]);
  return parts;
}

Outputs SymSum(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& a = *in[0];
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(a.shape, attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  std::vector<std::vector<TermId>> parts =
      GatherReduced(a, reduced, static_cast<int64_t>(out[0].data.size()));
  for (size_t o = 0; o < parts.size(); ++o) out[0].data[o] = terms.Sum(parts[o]);
  return out;
}

// The sum divided by the mean's count (ir::ops::MeanCount).
Outputs SymMean(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& a = *in[0];
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedDims(a.shape, attrs));
  LOOM_ASSIGN_OR_RETURN(int64_t count, ir::ops::MeanCount(a.shape, attrs));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (count == 0 && !out[0].data.empty()) {
    // The reference divides 0 by 0 here; a NaN has no term.
    return absl::InvalidArgumentError("attribute 'dims' averages over an empty dim");
  }
  std::vector<std::vector<TermId>> parts =
      GatherReduced(a, reduced, static_cast<int64_t>(out[0].data.size()));
  for (size_t o = 0; o < parts.size(); ++o) {
    out[0].data[o] = terms.Mul(terms.Sum(parts[o]), terms.Rational(1, count));
  }
  return out;
}

// The values of `a` along the view's dim at (o, i).
std::vector<TermId> Fiber(const SymTensor& a, const AxisView& v, int64_t o, int64_t i) {
  std::vector<TermId> fiber;
  fiber.reserve(static_cast<size_t>(v.n));
  for (int64_t k = 0; k < v.n; ++k) fiber.push_back(a.data[v.at(o, k, i)]);
  return fiber;
}

Outputs SymMax(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& a = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(a.shape, attrs));
  AxisView v = ViewAround(a.shape, dim);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      out[0].data[o * v.inner + i] = terms.Max(Fiber(a, v, o, i));
    }
  }
  return out;
}

// dy lands at the first position of the maximum along `dim`: the argmax is an
// uninterpreted function of the whole fiber (with one element it is 0).
Outputs SymMaxGrad(smt::Terms& terms, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& a = *in[0];
  const SymTensor& dy = *in[1];
  LOOM_ASSIGN_OR_RETURN(int dim, AxisAttr(a.shape, attrs));
  AxisView v = ViewAround(a.shape, dim);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const TermId g = dy.data[o * v.inner + i];
      if (v.n == 1) {
        out[0].data[v.at(o, 0, i)] = g;
        continue;
      }
      const TermId best = terms.Fn(kArgMaxFn, Fiber(a, v, o, i));
      for (int64_t k = 0; k < v.n; ++k) {
        out[0].data[v.at(o, k, i)] = terms.Mul(terms.Indicator(best, terms.Int(k)), g);
      }
    }
  }
  return out;
}

Outputs SymSumSquares(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& a = *in[0];
  std::vector<TermId> squares;
  squares.reserve(a.data.size());
  for (TermId x : a.data) squares.push_back(terms.Mul(x, x));
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  out[0].data[0] = terms.Sum(squares);
  return out;
}

// exp(x - max) / sum(exp(x - max)) along the last dim.
Outputs SymSoftmax(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int64_t n = LastDim(x.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (n == 0) return out;
  for (int64_t r = 0; r < NumRows(x.shape); ++r) {
    std::vector<TermId> y = Softmax(terms, Slice(x, r * n, n));
    for (int64_t j = 0; j < n; ++j) out[0].data[r * n + j] = y[j];
  }
  return out;
}

// x - logsumexp(x) along the last dim.
Outputs SymLogSoftmax(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int64_t n = LastDim(x.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  if (n == 0) return out;
  for (int64_t r = 0; r < NumRows(x.shape); ++r) {
    const TermId lse = LogSumExp(terms, Slice(x, r * n, n));
    for (int64_t j = 0; j < n; ++j) out[0].data[r * n + j] = terms.Sub(x.data[r * n + j], lse);
  }
  return out;
}

// dx = y * (dy - sum_last(y * dy)).
Outputs SymSoftmaxGrad(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& y = *in[0];
  const SymTensor& dy = *in[1];
  const int64_t n = LastDim(y.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t r = 0; r < NumRows(y.shape); ++r) {
    std::vector<TermId> products;
    for (int64_t j = 0; j < n; ++j) {
      products.push_back(terms.Mul(y.data[r * n + j], dy.data[r * n + j]));
    }
    const TermId dot = terms.Sum(products);
    for (int64_t j = 0; j < n; ++j) {
      out[0].data[r * n + j] = terms.Mul(y.data[r * n + j], terms.Sub(dy.data[r * n + j], dot));
    }
  }
  return out;
}

// dx = dy - exp(y) * sum_last(dy).
Outputs SymLogSoftmaxGrad(smt::Terms& terms, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& y = *in[0];
  const SymTensor& dy = *in[1];
  const int64_t n = LastDim(y.shape);
  std::vector<SymTensor> out = ZeroOutputs(terms, out_types);
  for (int64_t r = 0; r < NumRows(y.shape); ++r) {
    const TermId total = terms.Sum(Slice(dy, r * n, n));
    for (int64_t j = 0; j < n; ++j) {
      out[0].data[r * n + j] =
          terms.Sub(dy.data[r * n + j], terms.Mul(Exp(terms, y.data[r * n + j]), total));
    }
  }
  return out;
}

}  // namespace

std::vector<SymKernel> ReduceSymKernels() {
  using ir::OpKind;
  return {
      MakeSymKernel<OpKind::kLogSoftmax, SymLogSoftmax>(),
      MakeSymKernel<OpKind::kLogSoftmaxGrad, SymLogSoftmaxGrad>(),
      MakeSymKernel<OpKind::kMax, SymMax>(),
      MakeSymKernel<OpKind::kMaxGrad, SymMaxGrad>(),
      MakeSymKernel<OpKind::kMean, SymMean>(),
      MakeSymKernel<OpKind::kSoftmax, SymSoftmax>(),
      MakeSymKernel<OpKind::kSoftmaxGrad, SymSoftmaxGrad>(),
      MakeSymKernel<OpKind::kSum, SymSum>(),
      MakeSymKernel<OpKind::kSumSquares, SymSumSquares>(),
  };
}

}  // namespace loom::verify::internal
