// Symbolic kernels of the pointwise family (reference kernels: ir/ops/pointwise.cc).
//
// Arithmetic is exact: division multiplies by the inverse, where(c, a, b) is
// c a + (1 - c) b for a 0/1 condition, and/or are a b and a + b - a b, relu is
// max(x, 0), equality is the indicator of its sides. Square root, cosine, sine,
// tanh and sigmoid are uninterpreted functions named after the real ones; the
// orders (lt, le), the step x > 0 and truncation toward zero are uninterpreted
// functions whose numeric meaning DefineSymbolicFunctions registers.

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

}  // namespace

std::vector<SymKernel> PointwiseSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kCast, Cast},
      {OpKind::kCompare, Compare},
      {OpKind::kCos, Unary<CosFn>},
      {OpKind::kDiv, Binary<DivFn>},
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
