// Symbolic kernels of the pointwise and index families (reference kernels:
// ir/ops/pointwise.cc, ir/ops/index_ops.cc).
//
// Arithmetic is exact: division multiplies by the inverse, where(c, a, b) is
// c a + (1 - c) b for a 0/1 condition, and/or are a b and a + b - a b, relu is
// max(x, 0), equality is the indicator of its sides. Square root, cosine, sine,
// tanh and sigmoid are uninterpreted functions named after the real ones; the
// orders (lt, le), the step x > 0 and truncation toward zero are uninterpreted
// functions whose numeric meaning DefineSymbolicFunctions registers. A gather by
// index tensors sums, over every row an index may name, the indicator of the
// index times that row (an index may also count from the end, as the kernel's).

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/attributes.h"
#include "ir/ops/op_util.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_elements.h"
#include "verify/sym_formulas.h"

namespace loom::verify::internal {
namespace {

using smt::TermId;
using smt::Terms;
using Outputs = absl::StatusOr<std::vector<SymTensor>>;
using Inputs = absl::Span<const SymTensor* const>;
using OutTypes = absl::Span<const ir::TensorType>;

template <TermId (*F)(Terms&, TermId)>
Outputs Unary(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  return std::vector<SymTensor>{
      MapElements(*in[0], out_types[0], [&t](TermId x) { return F(t, x); })};
}

template <TermId (*F)(Terms&, TermId, TermId)>
Outputs Binary(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  return std::vector<SymTensor>{
      MapElements2(*in[0], *in[1], out_types[0], [&t](TermId a, TermId b) { return F(t, a, b); })};
}

TermId SqrtFn(Terms& t, TermId x) { return t.Fn("sqrt", {x}); }
TermId CosFn(Terms& t, TermId x) { return t.Fn(kCosFn, {x}); }
TermId SinFn(Terms& t, TermId x) { return t.Fn(kSinFn, {x}); }
TermId TanhFn(Terms& t, TermId x) { return t.Fn("tanh", {x}); }
TermId SigmoidFn(Terms& t, TermId x) { return t.Fn("sigmoid", {x}); }
TermId ReluFn(Terms& t, TermId x) { return t.Max({x, t.Zero()}); }
TermId DivFn(Terms& t, TermId a, TermId b) { return t.Div(a, b); }
// tanh_grad(y, dy) = dy (1 - y^2); sigmoid_grad(y, dy) = dy y (1 - y).
TermId TanhGradFn(Terms& t, TermId y, TermId dy) {
  return t.Mul(dy, t.Sub(t.One(), t.PowInt(y, 2)));
}
TermId SigmoidGradFn(Terms& t, TermId y, TermId dy) {
  return t.Product({dy, y, t.Sub(t.One(), y)});
}
// relu_grad(x, dy) = dy step(x).
TermId ReluGradFn(Terms& t, TermId x, TermId dy) { return t.Mul(dy, t.Fn(kStepFn, {x})); }

Outputs Compare(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<std::string> op = attrs.GetString("op");
  if (!op.ok()) return OpError("compare", op.status());
  const std::string o = *op;
  if (o != "eq" && o != "ne" && o != "lt" && o != "le" && o != "gt" && o != "ge") {
    return absl::InvalidArgumentError(absl::StrCat("op 'compare': attribute 'op' is '", o, "'"));
  }
  return std::vector<SymTensor>{
      MapElements2(*in[0], *in[1], out_types[0], [&t, &o](TermId a, TermId b) -> TermId {
        if (o == "eq") return t.Indicator(a, b);
        if (o == "ne") return t.Sub(t.One(), t.Indicator(a, b));
        if (o == "lt") return t.Fn(kLessFn, {a, b});
        if (o == "le") return t.Fn(kLessEqualFn, {a, b});
        if (o == "gt") return t.Fn(kLessFn, {b, a});
        return t.Fn(kLessEqualFn, {b, a});
      })};
}

Outputs Logical(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<std::string> op = attrs.GetString("op");
  if (!op.ok()) return OpError("logical", op.status());
  if (*op != "and" && *op != "or") {
    return absl::InvalidArgumentError(absl::StrCat("op 'logical': attribute 'op' is '", *op, "'"));
  }
  const bool is_and = *op == "and";
  return std::vector<SymTensor>{
      MapElements2(*in[0], *in[1], out_types[0], [&t, is_and](TermId a, TermId b) {
        const TermId both = t.Mul(a, b);
        return is_and ? both : t.Sub(t.Add(a, b), both);
      })};
}

// where(c, a, b) = c a + (1 - c) b at every position of the broadcast result.
Outputs Where(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const std::vector<int64_t>& dims = out_types[0].shape.dims();
  const std::vector<int64_t> ic = ir::ops::BroadcastSource(in[0]->shape.dims(), dims);
  const std::vector<int64_t> ia = ir::ops::BroadcastSource(in[1]->shape.dims(), dims);
  const std::vector<int64_t> ib = ir::ops::BroadcastSource(in[2]->shape.dims(), dims);
  SymTensor y = FilledLike(out_types[0], t.Zero());
  for (size_t i = 0; i < y.data.size(); ++i) {
    const TermId c = in[0]->data[ic[i]];
    y.data[i] = t.Add(t.Mul(c, in[1]->data[ia[i]]), t.Mul(t.Sub(t.One(), c), in[2]->data[ib[i]]));
  }
  return std::vector<SymTensor>{std::move(y)};
}

Outputs Cast(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const ir::DType to = out_types[0].dtype;
  const ir::DType from = in[0]->dtype;
  return std::vector<SymTensor>{MapElements(*in[0], out_types[0], [&](TermId x) -> TermId {
    if (to == ir::DType::kBool) return t.Sub(t.One(), t.Indicator(x, t.Zero()));
    if (!ir::IsFloat(to) && ir::IsFloat(from)) return t.Fn(kTruncFn, {x});
    return x;
  })};
}

Outputs Arange(Terms& t, Inputs, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<double> start = attrs.GetFloat("start");
  if (!start.ok()) return OpError("arange", start.status());
  absl::StatusOr<double> step = attrs.GetFloat("step");
  if (!step.ok()) return OpError("arange", step.status());
  if (!std::isfinite(*start) || !std::isfinite(*step)) {
    return absl::InvalidArgumentError("op 'arange': start and step must be finite");
  }
  SymTensor y = FilledLike(out_types[0], t.Zero());
  for (size_t i = 0; i < y.data.size(); ++i) {
    y.data[i] = t.Add(t.Double(*start), t.Mul(t.Int(static_cast<int64_t>(i)), t.Double(*step)));
  }
  return std::vector<SymTensor>{std::move(y)};
}

Outputs Cumsum(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<int64_t> d = attrs.GetInt("dim");
  if (!d.ok()) return OpError("cumsum", d.status());
  const SymTensor& x = *in[0];
  absl::StatusOr<int> dim = ir::NormalizeDim(*d, x.shape.rank());
  if (!dim.ok()) return OpError("cumsum", dim.status());
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const int64_t outer = DimProduct(x.shape, 0, *dim);
  const int64_t n = x.shape.dim(*dim);
  const int64_t inner = DimProduct(x.shape, *dim + 1, x.shape.rank());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      TermId acc = t.Zero();
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = (o * n + k) * inner + i;
        acc = t.Add(acc, x.data[at]);
        y.data[at] = acc;
      }
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// x[i0[p], ..., i{k-1}[p], r] as the sum over every addressed row a of
// prod_m [i_m[p] names a_m] x[a, r]; an index names row a as a or a - size.
Outputs Index(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int k = static_cast<int>(in.size()) - 1;
  const std::vector<int64_t>& out_dims = out_types[0].shape.dims();
  const std::vector<int64_t> p_dims(out_dims.begin(), out_dims.end() - (x.shape.rank() - k));
  std::vector<std::vector<int64_t>> source;
  for (int m = 1; m <= k; ++m) {
    source.push_back(ir::ops::BroadcastSource(in[m]->shape.dims(), p_dims));
  }
  const int64_t rows = DimProduct(x.shape, 0, k);
  const int64_t rest = DimProduct(x.shape, k, x.shape.rank());
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const int64_t positions = rest == 0 ? 0 : static_cast<int64_t>(y.data.size()) / rest;
  for (int64_t p = 0; p < positions; ++p) {
    // The indicator that position p's indices name row a, for each row a.
    std::vector<TermId> names(static_cast<size_t>(rows), t.One());
    for (int64_t a = 0; a < rows; ++a) {
      int64_t left = a;
      for (int m = k - 1; m >= 0; --m) {
        const int64_t size = x.shape.dim(m);
        const int64_t am = left % size;
        left /= size;
        const TermId id = in[m + 1]->data[source[m][p]];
        names[a] = t.Mul(names[a], t.Add(t.Indicator(id, t.Int(am)), t.Indicator(id, t.Int(am - size))));
      }
    }
    for (int64_t r = 0; r < rest; ++r) {
      std::vector<TermId> terms;
      for (int64_t a = 0; a < rows; ++a) terms.push_back(t.Mul(names[a], x.data[a * rest + r]));
      y.data[p * rest + r] = t.Sum(terms);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

}  // namespace

std::vector<SymKernel> PointwiseSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kArange, Arange},
      {OpKind::kCast, Cast},
      {OpKind::kCompare, Compare},
      {OpKind::kCos, Unary<CosFn>},
      {OpKind::kCumsum, Cumsum},
      {OpKind::kDiv, Binary<DivFn>},
      {OpKind::kIndex, Index},
      {OpKind::kLogical, Logical},
      {OpKind::kRelu, Unary<ReluFn>},
      {OpKind::kReluGrad, Binary<ReluGradFn>},
      {OpKind::kSigmoid, Unary<SigmoidFn>},
      {OpKind::kSigmoidGrad, Binary<SigmoidGradFn>},
      {OpKind::kSin, Unary<SinFn>},
      {OpKind::kSqrt, Unary<SqrtFn>},
      {OpKind::kTanh, Unary<TanhFn>},
      {OpKind::kTanhGrad, Binary<TanhGradFn>},
      {OpKind::kWhere, Where},
  };
}

}  // namespace loom::verify::internal
