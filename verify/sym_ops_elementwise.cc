// Symbolic kernels of the elementwise family (reference kernels: ir/ops/elementwise.cc).
//
// Every kernel maps elements at the same position; activations are written with
// the same formulas as the reference, tanh / sigmoid / exp / log / rsqrt as
// uninterpreted functions and gelu's constants at their exact binary values.

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/attributes.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_elements.h"

namespace loom::verify::internal {
namespace {

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi), as in the reference
constexpr double kGeluA = 0.044715;
constexpr double kSqrtHalf = 0.7071067811865476;     // 1 / sqrt(2), as in the reference
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
// Integer exponents up to this size become products (PowInt); larger ones stay
// uninterpreted so that a power of a sum is never expanded into a huge polynomial.
constexpr double kMaxIntExponent = 64;

// ---- formulas shared by several kernels -------------------------------------------

TermId Sigmoid(Terms& t, TermId x) { return t.Fn("sigmoid", {x}); }

TermId Silu(Terms& t, TermId x) { return t.Mul(x, Sigmoid(t, x)); }

// s (1 + x (1 - s)) with s = sigmoid(x).
TermId SiluDerivative(Terms& t, TermId x) {
  const TermId s = Sigmoid(t, x);
  return t.Mul(s, t.Add(t.One(), t.Mul(x, t.Sub(t.One(), s))));
}

// kGeluC (x + kGeluA x^3).
TermId GeluInner(Terms& t, TermId x) {
  return t.Mul(t.Double(kGeluC), t.Add(x, t.Mul(t.Double(kGeluA), t.PowInt(x, 3))));
}

// 0.5 x (1 + tanh(u)).
TermId Gelu(Terms& t, TermId x) {
  const TermId th = t.Fn("tanh", {GeluInner(t, x)});
  return t.Product({t.Rational(1, 2), x, t.Add(t.One(), th)});
}

// 0.5 (1 + th) + 0.5 x (1 - th^2) du, th = tanh(u), du = kGeluC (1 + 3 kGeluA x^2).
TermId GeluDerivative(Terms& t, TermId x) {
  const TermId th = t.Fn("tanh", {GeluInner(t, x)});
  const TermId du = t.Mul(t.Double(kGeluC),
                          t.Add(t.One(), t.Product({t.Int(3), t.Double(kGeluA), t.PowInt(x, 2)})));
  const TermId left = t.Mul(t.Rational(1, 2), t.Add(t.One(), th));
  const TermId right = t.Product({t.Rational(1, 2), x, t.Sub(t.One(), t.PowInt(th, 2)), du});
  return t.Add(left, right);
}

// Phi(x) = 0.5 (1 + erf(x / sqrt 2)).
TermId NormalCdf(Terms& t, TermId x) {
  return t.Mul(t.Rational(1, 2),
               t.Add(t.One(), t.Fn("erf", {t.Mul(x, t.Double(kSqrtHalf))})));
}

// The exact gelu x Phi(x), and its derivative Phi(x) + x phi(x), phi(x) =
// exp(-x^2 / 2) / sqrt(2 pi).
TermId GeluExact(Terms& t, TermId x) { return t.Mul(x, NormalCdf(t, x)); }
TermId GeluExactDerivative(Terms& t, TermId x) {
  const TermId density = t.Mul(t.Fn("exp", {t.Mul(t.Rational(-1, 2), t.PowInt(x, 2))}),
                               t.Double(kInvSqrt2Pi));
  return t.Add(NormalCdf(t, x), t.Mul(x, density));
}

// x^p: an integer p (within kMaxIntExponent) as a product, any other p as the
// uninterpreted "pow_<p>" with p printed so that it parses back exactly.
TermId Pow(Terms& t, TermId x, double p) {
  if (std::isfinite(p) && p == std::floor(p) && std::fabs(p) <= kMaxIntExponent) {
    return t.PowInt(x, static_cast<int>(p));
  }
  return t.Fn(absl::StrCat("pow_", ir::AttrValueToString(ir::AttrValue(p))), {x});
}

// ---- kernels ------------------------------------------------------------------------

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

TermId AddFn(Terms& t, TermId a, TermId b) { return t.Add(a, b); }
TermId SubFn(Terms& t, TermId a, TermId b) { return t.Sub(a, b); }
TermId MulFn(Terms& t, TermId a, TermId b) { return t.Mul(a, b); }
TermId NegFn(Terms& t, TermId x) { return t.Neg(x); }
TermId ExpFn(Terms& t, TermId x) { return t.Fn("exp", {x}); }
TermId LogFn(Terms& t, TermId x) { return t.Fn("log", {x}); }
TermId RsqrtFn(Terms& t, TermId x) { return t.Fn("rsqrt", {x}); }
TermId IdentityFn(Terms&, TermId x) { return x; }
TermId GeluFn(Terms& t, TermId x) { return Gelu(t, x); }
TermId GeluExactFn(Terms& t, TermId x) { return GeluExact(t, x); }
TermId SiluFn(Terms& t, TermId x) { return Silu(t, x); }
// gelu_grad(x, dy), silu_grad(x, dy), swiglu(gate, up).
TermId GeluGradFn(Terms& t, TermId x, TermId dy) { return t.Mul(dy, GeluDerivative(t, x)); }
TermId GeluExactGradFn(Terms& t, TermId x, TermId dy) {
  return t.Mul(dy, GeluExactDerivative(t, x));
}
TermId SiluGradFn(Terms& t, TermId x, TermId dy) { return t.Mul(dy, SiluDerivative(t, x)); }
TermId SwiGluFn(Terms& t, TermId gate, TermId up) { return t.Mul(Silu(t, gate), up); }

// The sum of every input, in input order (gradient accumulation).
Outputs Accumulate(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  SymTensor y = FilledLike(out_types[0], t.Zero());
  std::vector<TermId> parts(in.size());
  for (size_t i = 0; i < y.data.size(); ++i) {
    for (size_t j = 0; j < in.size(); ++j) parts[j] = in[j]->data[i];
    y.data[i] = t.Sum(parts);
  }
  return std::vector<SymTensor>{std::move(y)};
}

Outputs PowKernel(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<double> p = attrs.GetFloat("exponent");
  if (!p.ok()) return OpError("pow", p.status());
  const double e = *p;
  return std::vector<SymTensor>{
      MapElements(*in[0], out_types[0], [&t, e](TermId x) { return Pow(t, x, e); })};
}

Outputs ScaleKernel(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<double> f = attrs.GetFloat("factor");
  if (!f.ok()) return OpError("scale", f.status());
  if (!std::isfinite(*f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op 'scale': attribute 'factor' is ", *f, ", expected a finite number"));
  }
  const TermId factor = t.Double(*f);
  return std::vector<SymTensor>{
      MapElements(*in[0], out_types[0], [&t, factor](TermId x) { return t.Mul(x, factor); })};
}

// x / s and x * s with s the single element of the scalar input 1.
Outputs DivScalar(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const TermId s = in[1]->data[0];
  return std::vector<SymTensor>{
      MapElements(*in[0], out_types[0], [&t, s](TermId x) { return t.Div(x, s); })};
}

Outputs MulScalar(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const TermId s = in[1]->data[0];
  return std::vector<SymTensor>{
      MapElements(*in[0], out_types[0], [&t, s](TermId x) { return t.Mul(x, s); })};
}

// swiglu_grad(gate, up, dy) -> (dy up silu'(gate), dy silu(gate)).
Outputs SwiGluGrad(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& gate = *in[0];
  const SymTensor& up = *in[1];
  const SymTensor& dy = *in[2];
  std::vector<SymTensor> out = FilledOutputs(out_types, t.Zero());
  for (size_t i = 0; i < gate.data.size(); ++i) {
    out[0].data[i] = t.Product({dy.data[i], up.data[i], SiluDerivative(t, gate.data[i])});
    out[1].data[i] = t.Mul(dy.data[i], Silu(t, gate.data[i]));
  }
  return out;
}

Outputs Fill(Terms& t, Inputs, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<double> v = attrs.GetFloat("value");
  if (!v.ok()) return OpError("fill", v.status());
  if (!std::isfinite(*v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op 'fill': attribute 'value' is ", *v, ", expected a finite number"));
  }
  return FilledOutputs(out_types, t.Double(*v));
}

}  // namespace

std::vector<SymKernel> ElementwiseSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kAccumulate, Accumulate},
      {OpKind::kAdd, Binary<AddFn>},
      {OpKind::kDivScalar, DivScalar},
      {OpKind::kExp, Unary<ExpFn>},
      {OpKind::kFill, Fill},
      {OpKind::kGelu, Unary<GeluFn>},
      {OpKind::kGeluGrad, Binary<GeluGradFn>},
      {OpKind::kGeluExact, Unary<GeluExactFn>},
      {OpKind::kGeluExactGrad, Binary<GeluExactGradFn>},
      {OpKind::kLog, Unary<LogFn>},
      {OpKind::kMul, Binary<MulFn>},
      {OpKind::kMulScalar, MulScalar},
      {OpKind::kNeg, Unary<NegFn>},
      {OpKind::kPow, PowKernel},
      {OpKind::kRsqrt, Unary<RsqrtFn>},
      {OpKind::kScale, ScaleKernel},
      {OpKind::kSilu, Unary<SiluFn>},
      {OpKind::kSiluGrad, Binary<SiluGradFn>},
      {OpKind::kStopGradient, Unary<IdentityFn>},
      {OpKind::kSub, Binary<SubFn>},
      {OpKind::kSwiGlu, Binary<SwiGluFn>},
      {OpKind::kSwiGluGrad, SwiGluGrad},
  };
}

}  // namespace loom::verify::internal
