// Elementwise ops: arithmetic, activations, constants, gradient accumulation and
// stop_gradient. All of them are spatial in every dim; none reduces. add, sub and
// mul broadcast their inputs (NumPy's rule).

#include <cmath>
#include <map>

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::ElementwiseSignature;
using ops::ExpectFloat;
using ops::ExpectSameType;
using ops::ExpectScalar;
using ops::FlopsPerOutputElement;

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
constexpr double kSqrtHalf = 0.7071067811865476;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

// ---- shared shape rules -----------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferUnary(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  return std::vector<TensorType>{in[0]};
}

// Unary op with a required float attribute (scale: factor, pow: exponent).
template <const char* kAttr>
absl::StatusOr<std::vector<TensorType>> InferUnaryWithFloat(absl::Span<const TensorType> in,
                                                            const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(attrs.GetFloat(kAttr).status());
  return InferUnary(in, attrs);
}
constexpr char kFactor[] = "factor";
constexpr char kExponent[] = "exponent";

// All inputs share one type (add, sub, mul, accumulate, gelu_grad, ...).
absl::StatusOr<std::vector<TensorType>> InferSameType(absl::Span<const TensorType> in,
                                                      const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  for (size_t i = 1; i < in.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectSameType(in, 0, static_cast<int>(i)));
  }
  return std::vector<TensorType>{in[0]};
}

// Two inputs of one dtype (any) whose dims broadcast (add, sub, mul).
absl::StatusOr<std::vector<TensorType>> InferBroadcast(absl::Span<const TensorType> in,
                                                       const AttrMap&) {
  if (in[1].dtype != in[0].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input 1 has dtype ", DTypeName(in[1].dtype),
                                                   ", input 0 has ", DTypeName(in[0].dtype)));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  // The result keeps the dim names of an input of its dims.
  for (const TensorType& t : in) {
    if (t.shape.dims() == dims) return std::vector<TensorType>{t};
  }
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), in[0].dtype}};
}

// Two same-typed inputs, two outputs of that type (swiglu_grad).
absl::StatusOr<std::vector<TensorType>> InferSameTypeTwoOut(absl::Span<const TensorType> in,
                                                            const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(auto out, InferSameType(in, attrs));
  return std::vector<TensorType>{out[0], out[0]};
}

// Tensor and a scalar of the same dtype (div_scalar, mul_scalar).
absl::StatusOr<std::vector<TensorType>> InferTensorScalar(absl::Span<const TensorType> in,
                                                          const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectScalar(in, 1));
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 1));
  return std::vector<TensorType>{in[0]};
}

absl::StatusOr<std::vector<TensorType>> InferFill(absl::Span<const TensorType>,
                                                  const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("shape"));
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("value").status());
  LOOM_ASSIGN_OR_RETURN(std::string dtype_name, attrs.GetString("dtype", "f32"));
  LOOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtype_name));
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError("attribute 'shape' has a negative dim");
  }
  return std::vector<TensorType>{TensorType{Shape(dims), dtype}};
}

absl::StatusOr<DimSignature> SignatureAll(absl::Span<const TensorType> in, const AttrMap&) {
  return ElementwiseSignature(in[0].shape.rank(), static_cast<int>(in.size()));
}

absl::StatusOr<DimSignature> SignatureBroadcast(absl::Span<const TensorType> in,
                                                const AttrMap&) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return ops::BroadcastSignature(in, dims);
}

absl::StatusOr<DimSignature> SignatureTwoOut(absl::Span<const TensorType> in,
                                             const AttrMap&) {
  return ElementwiseSignature(in[0].shape.rank(), static_cast<int>(in.size()), 2);
}

absl::StatusOr<DimSignature> SignatureTensorScalar(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  DimSignature sig = ElementwiseSignature(in[0].shape.rank(), 1);
  sig.inputs.push_back({});  // the scalar carries no dims
  return sig;
}

absl::StatusOr<DimSignature> SignatureFill(absl::Span<const TensorType>,
                                           const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("shape"));
  return ElementwiseSignature(static_cast<int>(dims.size()), 0);
}

template <int kPerElement>
double Flops(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, kPerElement);
}

double FlopsAccumulate(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                       const AttrMap&) {
  return FlopsPerOutputElement(out, static_cast<double>(in.size()) - 1);
}

// ---- kernels ------------------------------------------------------------------

template <typename F>
absl::Status Map1(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out, F f) {
  const HostTensor& x = *in[0];
  for (int64_t i = 0; i < x.size(); ++i) out[0][i] = f(x[i]);
  return absl::OkStatus();
}

template <typename F>
absl::Status Map2(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out, F f) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  for (int64_t i = 0; i < a.size(); ++i) out[0][i] = f(a[i], b[i]);
  return absl::OkStatus();
}

// Two inputs that broadcast to the output's dims.
template <typename F>
absl::Status Broadcast2(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out, F f) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  if (a.shape.dims() == out[0].shape.dims() && b.shape.dims() == out[0].shape.dims()) {
    return Map2(in, out, f);
  }
  const std::vector<int64_t> ia = ops::BroadcastSource(a.shape.dims(), out[0].shape.dims());
  const std::vector<int64_t> ib = ops::BroadcastSource(b.shape.dims(), out[0].shape.dims());
  for (int64_t i = 0; i < out[0].size(); ++i) out[0][i] = f(a[ia[i]], b[ib[i]]);
  return absl::OkStatus();
}

double Gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x)));
}
double GeluDerivative(double x) {
  double u = kGeluC * (x + kGeluA * x * x * x);
  double t = std::tanh(u);
  double du = kGeluC * (1.0 + 3.0 * kGeluA * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}
// The exact gelu: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), and its derivative
// Phi(x) + x phi(x).
double GeluExact(double x) { return 0.5 * x * (1.0 + std::erf(x * kSqrtHalf)); }
double GeluExactDerivative(double x) {
  return 0.5 * (1.0 + std::erf(x * kSqrtHalf)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }
double SiluDerivative(double x) {
  double s = Sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

absl::Status KernelAdd(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Broadcast2(in, out, [](double a, double b) { return a + b; });
}
absl::Status KernelSub(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Broadcast2(in, out, [](double a, double b) { return a - b; });
}
absl::Status KernelMul(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Broadcast2(in, out, [](double a, double b) { return a * b; });
}
absl::Status KernelAccumulate(absl::Span<const HostTensor* const> in, const AttrMap&,
                              absl::Span<HostTensor> out) {
  for (const HostTensor* x : in) {
    for (int64_t i = 0; i < x->size(); ++i) out[0][i] += (*x)[i];
  }
  return absl::OkStatus();
}
absl::Status KernelNeg(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return -x; });
}
absl::Status KernelExp(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::exp(x); });
}
absl::Status KernelLog(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::log(x); });
}
absl::Status KernelIdentity(absl::Span<const HostTensor* const> in, const AttrMap&,
                            absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return x; });
}
absl::Status KernelRsqrt(absl::Span<const HostTensor* const> in, const AttrMap&,
                         absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return 1.0 / std::sqrt(x); });
}
absl::Status KernelPow(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                       absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double p, attrs.GetFloat("exponent"));
  return Map1(in, out, [p](double x) { return std::pow(x, p); });
}
absl::Status KernelScale(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                         absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double f, attrs.GetFloat("factor"));
  return Map1(in, out, [f](double x) { return x * f; });
}
absl::Status KernelDivScalar(absl::Span<const HostTensor* const> in, const AttrMap&,
                             absl::Span<HostTensor> out) {
  double s = (*in[1])[0];
  return Map1(in, out, [s](double x) { return x / s; });
}
absl::Status KernelMulScalar(absl::Span<const HostTensor* const> in, const AttrMap&,
                             absl::Span<HostTensor> out) {
  double s = (*in[1])[0];
  return Map1(in, out, [s](double x) { return x * s; });
}
absl::Status KernelGelu(absl::Span<const HostTensor* const> in, const AttrMap&,
                        absl::Span<HostTensor> out) {
  return Map1(in, out, Gelu);
}
absl::Status KernelGeluGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                            absl::Span<HostTensor> out) {
  return Map2(in, out, [](double x, double dy) { return dy * GeluDerivative(x); });
}
absl::Status KernelGeluExact(absl::Span<const HostTensor* const> in, const AttrMap&,
                             absl::Span<HostTensor> out) {
  return Map1(in, out, GeluExact);
}
absl::Status KernelGeluExactGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                                 absl::Span<HostTensor> out) {
  return Map2(in, out, [](double x, double dy) { return dy * GeluExactDerivative(x); });
}
absl::Status KernelSilu(absl::Span<const HostTensor* const> in, const AttrMap&,
                        absl::Span<HostTensor> out) {
  return Map1(in, out, Silu);
}
absl::Status KernelSiluGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                            absl::Span<HostTensor> out) {
  return Map2(in, out, [](double x, double dy) { return dy * SiluDerivative(x); });
}
absl::Status KernelSwiGlu(absl::Span<const HostTensor* const> in, const AttrMap&,
                          absl::Span<HostTensor> out) {
  return Map2(in, out, [](double gate, double up) { return Silu(gate) * up; });
}
absl::Status KernelSwiGluGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                              absl::Span<HostTensor> out) {
  const HostTensor& gate = *in[0];
  const HostTensor& up = *in[1];
  const HostTensor& dy = *in[2];
  for (int64_t i = 0; i < gate.size(); ++i) {
    out[0][i] = dy[i] * up[i] * SiluDerivative(gate[i]);
    out[1][i] = dy[i] * Silu(gate[i]);
  }
  return absl::OkStatus();
}
absl::Status KernelFill(absl::Span<const HostTensor* const>, const AttrMap& attrs,
                        absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double v, attrs.GetFloat("value"));
  for (double& x : out[0].data) x = v;
  return absl::OkStatus();
}

// ---- pieces ---------------------------------------------------------------------

// A piece of a fill produces its output box: `shape` becomes the box's dims.
absl::StatusOr<AttrMap> ShardAttrsFill(const AttrMap& attrs, absl::Span<const TensorType>,
                                       absl::Span<const Box>, absl::Span<const TensorType> out,
                                       absl::Span<const Box> out_boxes) {
  if (out_boxes.size() != 1 || static_cast<int>(out_boxes[0].size()) != out[0].shape.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fill piece needs one output box of ", out[0].shape.rank(), " dims"));
  }
  AttrMap piece = attrs;
  piece.Set("shape", BoxDims(out_boxes[0]));
  return piece;
}

// ---- gradient rules -----------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// The gradient of a broadcast input i from the output's gradient `g`: summed over
// the dims input i was broadcast along, then given input i's dims.
absl::StatusOr<TensorId> SumToInput(GradBuilder& b, TensorId g, int i) {
  // Copies: the graph grows (and moves its tensors) as ops are emitted.
  const std::vector<int64_t> out = b.graph().tensor(g).shape.dims();
  const std::vector<int64_t> in = b.input_type(i).shape.dims();
  if (in == out) return g;
  const int offset = static_cast<int>(out.size() - in.size());
  std::vector<int64_t> dims;
  for (int d = 0; d < static_cast<int>(out.size()); ++d) {
    if (d < offset || (in[d - offset] == 1 && out[d] != 1)) dims.push_back(d);
  }
  LOOM_ASSIGN_OR_RETURN(TensorId summed,
                        b.Emit1(OpKind::kSum, {g}, {{"dims", dims}}, "broadcast_grad"));
  return b.Emit1(OpKind::kReshape, {summed}, {{"shape", in}}, b.GradName(i));
}

Grads GradAdd(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId da, SumToInput(b, dy, 0));
  LOOM_ASSIGN_OR_RETURN(TensorId db, SumToInput(b, dy, 1));
  return std::vector<std::optional<TensorId>>{da, db};
}

Grads GradSub(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId neg, b.Emit1(OpKind::kNeg, {dy}, {}, b.GradName(1)));
  LOOM_ASSIGN_OR_RETURN(TensorId da, SumToInput(b, dy, 0));
  LOOM_ASSIGN_OR_RETURN(TensorId db, SumToInput(b, neg, 1));
  return std::vector<std::optional<TensorId>>{da, db};
}

Grads GradMul(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId ga, b.Emit1(OpKind::kMul, {dy, b.input(1)}, {}, b.GradName(0)));
  LOOM_ASSIGN_OR_RETURN(TensorId gb, b.Emit1(OpKind::kMul, {dy, b.input(0)}, {}, b.GradName(1)));
  LOOM_ASSIGN_OR_RETURN(TensorId da, SumToInput(b, ga, 0));
  LOOM_ASSIGN_OR_RETURN(TensorId db, SumToInput(b, gb, 1));
  return std::vector<std::optional<TensorId>>{da, db};
}

Grads GradAccumulate(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  return std::vector<std::optional<TensorId>>(b.op().inputs.size(), dy);
}

Grads GradNeg(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kNeg, {dy}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradExp(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kMul, {dy, b.output(0)}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// d/dx log(x) = x^(-1).
Grads GradLog(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId inv, b.Emit1(OpKind::kPow, {b.input(0)},
                                              {{"exponent", -1.0}}, "log_slope"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMul, {dy, inv}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// No gradient flows back through stop_gradient.
Grads GradStopGradient(GradBuilder&) {
  return std::vector<std::optional<TensorId>>{std::nullopt};
}

// d/dx x^(-1/2) = -1/2 y^3 with y = x^(-1/2).
Grads GradRsqrt(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId y3, b.Emit1(OpKind::kPow, {b.output(0)},
                                             {{"exponent", 3.0}}, "rsqrt_cubed"));
  LOOM_ASSIGN_OR_RETURN(TensorId local,
                        b.Emit1(OpKind::kScale, {y3}, {{"factor", -0.5}}, "rsqrt_slope"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMul, {dy, local}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// d/dx x^p = p x^(p-1).
Grads GradPow(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(double p, b.op().attrs.GetFloat("exponent"));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId xp,
                        b.Emit1(OpKind::kPow, {b.input(0)}, {{"exponent", p - 1.0}}, "pow_slope"));
  LOOM_ASSIGN_OR_RETURN(TensorId local,
                        b.Emit1(OpKind::kScale, {xp}, {{"factor", p}}, "pow_slope"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMul, {dy, local}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradScale(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(double f, b.op().attrs.GetFloat("factor"));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kScale, {dy}, {{"factor", f}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// Sum of dy * a over every dim: the gradient of a scalar factor.
absl::StatusOr<TensorId> DotAll(GradBuilder& b, TensorId dy, TensorId a, absl::string_view name) {
  LOOM_ASSIGN_OR_RETURN(TensorId prod, b.Emit1(OpKind::kMul, {dy, a}, {}, "scalar_grad_terms"));
  std::vector<int64_t> dims;
  for (int i = 0; i < b.graph().tensor(a).shape.rank(); ++i) dims.push_back(i);
  return b.Emit1(OpKind::kSum, {prod}, {{"dims", dims}}, name);
}

// y = a / s: da = dy / s, ds = -sum(dy * a) / s^2.
Grads GradDivScalar(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  TensorId s = b.input(1);
  LOOM_ASSIGN_OR_RETURN(TensorId da, b.Emit1(OpKind::kDivScalar, {dy, s}, {}, b.GradName(0)));
  LOOM_ASSIGN_OR_RETURN(TensorId dot, DotAll(b, dy, b.input(0), "div_scalar_dot"));
  LOOM_ASSIGN_OR_RETURN(TensorId q1, b.Emit1(OpKind::kDivScalar, {dot, s}, {}, "div_scalar_q"));
  LOOM_ASSIGN_OR_RETURN(TensorId q2, b.Emit1(OpKind::kDivScalar, {q1, s}, {}, "div_scalar_q"));
  LOOM_ASSIGN_OR_RETURN(TensorId ds, b.Emit1(OpKind::kNeg, {q2}, {}, b.GradName(1)));
  return std::vector<std::optional<TensorId>>{da, ds};
}

// y = a * s: da = dy * s, ds = sum(dy * a).
Grads GradMulScalar(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId da,
                        b.Emit1(OpKind::kMulScalar, {dy, b.input(1)}, {}, b.GradName(0)));
  LOOM_ASSIGN_OR_RETURN(TensorId ds, DotAll(b, dy, b.input(0), b.GradName(1)));
  return std::vector<std::optional<TensorId>>{da, ds};
}

template <OpKind kGradKind>
Grads GradActivation(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(kGradKind, {b.input(0), dy}, {}, b.GradName(0)));
  return Grads(std::vector<std::optional<TensorId>>(1, dx));
}

Grads GradSwiGlu(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> d,
                        b.Emit(OpKind::kSwiGluGrad, {b.input(0), b.input(1), dy}, {},
                               b.GradName(0)));
  return std::vector<std::optional<TensorId>>{d[0], d[1]};
}

// fill's shape: the new sizes of its output labels.
absl::StatusOr<AttrMap> ResizeFill(const AttrMap& attrs, const DimSignature& sig,
                                   absl::Span<const TensorType>, absl::Span<const TensorType>,
                                   const std::map<std::string, int64_t>& label_sizes) {
  LOOM_RET_CHECK(!sig.outputs.empty()) << "fill without an output";
  std::vector<int64_t> dims;
  for (const std::string& l : sig.outputs[0]) {
    LOOM_ASSIGN_OR_RETURN(int64_t d, ops::LabelSize(label_sizes, l));
    dims.push_back(d);
  }
  AttrMap out = attrs;
  out.Set("shape", dims);
  return out;
}

}  // namespace

void RegisterElementwiseOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc, ShardAttrsFn shard_attrs = nullptr,
                 bool commutative = false) -> OpSchema& {
    OpSchema schema{kind, infer, sig, kernel, flops, grad, doc, shard_attrs};
    schema.commutative = commutative;
    return table.Register(std::move(schema));
  };
  reg(OpKind::kAccumulate, InferSameType, SignatureAll, KernelAccumulate, FlopsAccumulate,
      GradAccumulate, "accumulate(x0, x1, ...) -> sum of the inputs (gradient accumulation)",
      nullptr, /*commutative=*/true)
      .LinearInEveryInput()
      .SumsOperands();
  reg(OpKind::kAdd, InferBroadcast, SignatureBroadcast, KernelAdd, Flops<1>, GradAdd,
      "add(a, b) -> a + b (one dtype; dims broadcast)", nullptr, /*commutative=*/true)
      .LinearInEveryInput()
      .SumsOperands();
  reg(OpKind::kDivScalar, InferTensorScalar, SignatureTensorScalar, KernelDivScalar, Flops<1>,
      GradDivScalar, "div_scalar(a, s) -> a / s, s a scalar tensor")
      .Linear({{0}})
      .Homogeneous({1}, -1);
  reg(OpKind::kExp, InferUnary, SignatureAll, KernelExp, Flops<4>, GradExp, "exp(x)");
  reg(OpKind::kFill, InferFill, SignatureFill, KernelFill, Flops<0>, nullptr,
      "fill() {shape, value, dtype} -> constant tensor", ShardAttrsFill)
      .Resizes(ResizeFill);
  reg(OpKind::kGelu, InferUnary, SignatureAll, KernelGelu, Flops<8>,
      GradActivation<OpKind::kGeluGrad>, "gelu(x), tanh approximation");
  reg(OpKind::kGeluGrad, InferSameType, SignatureAll, KernelGeluGrad, Flops<12>, nullptr,
      "gelu_grad(x, dy) -> dx")
      .Homogeneous({1}, 1);
  reg(OpKind::kGeluExact, InferUnary, SignatureAll, KernelGeluExact, Flops<8>,
      GradActivation<OpKind::kGeluExactGrad>, "gelu_exact(x) -> 0.5 x (1 + erf(x / sqrt 2))");
  reg(OpKind::kGeluExactGrad, InferSameType, SignatureAll, KernelGeluExactGrad, Flops<12>,
      nullptr, "gelu_exact_grad(x, dy) -> dx")
      .Homogeneous({1}, 1);
  reg(OpKind::kLog, InferUnary, SignatureAll, KernelLog, Flops<4>, GradLog,
      "log(x) -> natural logarithm");
  reg(OpKind::kMul, InferBroadcast, SignatureBroadcast, KernelMul, Flops<1>, GradMul,
      "mul(a, b) -> a * b (one dtype; dims broadcast)", nullptr, /*commutative=*/true)
      .Linear({{0}, {1}});
  reg(OpKind::kMulScalar, InferTensorScalar, SignatureTensorScalar, KernelMulScalar, Flops<1>,
      GradMulScalar, "mul_scalar(a, s) -> a * s, s a scalar tensor")
      .Linear({{0}})
      .Homogeneous({1}, 1);
  reg(OpKind::kNeg, InferUnary, SignatureAll, KernelNeg, Flops<1>, GradNeg, "neg(x) -> -x")
      .Linear({{0}});
  reg(OpKind::kPow, InferUnaryWithFloat<kExponent>, SignatureAll, KernelPow, Flops<4>, GradPow,
      "pow(x) {exponent} -> x^exponent");
  reg(OpKind::kRsqrt, InferUnary, SignatureAll, KernelRsqrt, Flops<2>, GradRsqrt,
      "rsqrt(x) -> 1/sqrt(x)");
  reg(OpKind::kScale, InferUnaryWithFloat<kFactor>, SignatureAll, KernelScale, Flops<1>, GradScale,
      "scale(x) {factor} -> x * factor")
      .Linear({{0}})
      .Attr("factor", AttrRole::kFactor);
  reg(OpKind::kSilu, InferUnary, SignatureAll, KernelSilu, Flops<5>,
      GradActivation<OpKind::kSiluGrad>, "silu(x) -> x * sigmoid(x)");
  reg(OpKind::kSiluGrad, InferSameType, SignatureAll, KernelSiluGrad, Flops<8>, nullptr,
      "silu_grad(x, dy) -> dx")
      .Homogeneous({1}, 1);
  reg(OpKind::kStopGradient, InferUnary, SignatureAll, KernelIdentity, Flops<0>,
      GradStopGradient, "stop_gradient(x) -> x; no gradient flows back to x")
      .Linear({{0}});
  reg(OpKind::kSub, InferBroadcast, SignatureBroadcast, KernelSub, Flops<1>, GradSub,
      "sub(a, b) -> a - b (one dtype; dims broadcast)")
      .LinearInEveryInput();
  reg(OpKind::kSwiGlu, InferSameType, SignatureAll, KernelSwiGlu, Flops<6>, GradSwiGlu,
      "swiglu(gate, up) -> silu(gate) * up");
  reg(OpKind::kSwiGluGrad, InferSameTypeTwoOut, SignatureTwoOut, KernelSwiGluGrad, Flops<10>,
      nullptr, "swiglu_grad(gate, up, dy) -> (dgate, dup)")
      .Homogeneous({2}, 1);
}

}  // namespace loom::ir
