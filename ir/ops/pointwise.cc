// Pointwise ops beyond the elementwise arithmetic of elementwise.cc: division,
// selection, comparisons and logic (which broadcast their inputs, NumPy's rule),
// the unary functions PyTorch programs use (square root, trigonometric, tanh,
// sigmoid, relu) with their gradients, and dtype conversion. Every dim is
// spatial; none reduces.

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::ExpectFloat;
using ops::ExpectSameType;
using ops::FlopsPerOutputElement;

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// ---- shape rules and signatures --------------------------------------------------

absl::Status ExpectSameDType(absl::Span<const TensorType> in, int i, int j) {
  if (in[i].dtype != in[j].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input ", j, " has dtype ",
                                                   DTypeName(in[j].dtype), ", input ", i,
                                                   " has ", DTypeName(in[i].dtype)));
  }
  return absl::OkStatus();
}

absl::Status ExpectBool(absl::Span<const TensorType> in, int i) {
  if (in[i].dtype != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " has dtype ",
                                                   DTypeName(in[i].dtype), ", expected bool"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorType>> InferUnaryFloat(absl::Span<const TensorType> in,
                                                        const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  return std::vector<TensorType>{in[0]};
}

// (y or x, dy) of one type: the gradients of the unary functions.
absl::StatusOr<std::vector<TensorType>> InferPair(absl::Span<const TensorType> in,
                                                  const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectSameType(in, 0, 1));
  return std::vector<TensorType>{in[0]};
}

// div: two float inputs of one dtype that broadcast.
absl::StatusOr<std::vector<TensorType>> InferDiv(absl::Span<const TensorType> in,
                                                 const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectFloat(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 1));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), in[0].dtype}};
}

// where(cond, a, b): a bool condition, two branches of one dtype; all broadcast.
absl::StatusOr<std::vector<TensorType>> InferWhere(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  LOOM_RETURN_IF_ERROR(ExpectBool(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 1, 2));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), in[1].dtype}};
}

enum class Comparison { kEq, kNe, kLt, kLe, kGt, kGe };

absl::StatusOr<Comparison> ComparisonOf(const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string op, attrs.GetString("op"));
  if (op == "eq") return Comparison::kEq;
  if (op == "ne") return Comparison::kNe;
  if (op == "lt") return Comparison::kLt;
  if (op == "le") return Comparison::kLe;
  if (op == "gt") return Comparison::kGt;
  if (op == "ge") return Comparison::kGe;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'op' is '", op, "', expected eq, ne, lt, le, gt or ge"));
}

// compare(a, b) {op}: two inputs of one dtype that broadcast; bool result.
absl::StatusOr<std::vector<TensorType>> InferCompare(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(ComparisonOf(attrs).status());
  LOOM_RETURN_IF_ERROR(ExpectSameDType(in, 0, 1));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), DType::kBool}};
}

absl::StatusOr<bool> IsAnd(const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string op, attrs.GetString("op"));
  if (op == "and") return true;
  if (op == "or") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("attribute 'op' is '", op, "', expected and or or"));
}

// logical(a, b) {op}: two bool inputs that broadcast; bool result.
absl::StatusOr<std::vector<TensorType>> InferLogical(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(IsAnd(attrs).status());
  LOOM_RETURN_IF_ERROR(ExpectBool(in, 0));
  LOOM_RETURN_IF_ERROR(ExpectBool(in, 1));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), DType::kBool}};
}

absl::StatusOr<std::vector<TensorType>> InferCast(absl::Span<const TensorType> in,
                                                  const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::string name, attrs.GetString("dtype"));
  LOOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(name));
  return std::vector<TensorType>{TensorType{in[0].shape, dtype}};
}

absl::StatusOr<DimSignature> SignatureSame(absl::Span<const TensorType> in, const AttrMap&) {
  return ops::ElementwiseSignature(in[0].shape.rank(), static_cast<int>(in.size()));
}

absl::StatusOr<DimSignature> SignatureBroadcast(absl::Span<const TensorType> in,
                                                const AttrMap&) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in));
  return ops::BroadcastSignature(in, dims);
}

template <int kPerElement>
double Flops(absl::Span<const TensorType>, absl::Span<const TensorType> out, const AttrMap&) {
  return FlopsPerOutputElement(out, kPerElement);
}

// ---- kernels ------------------------------------------------------------------------

template <typename F>
absl::Status Map1(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out, F f) {
  const HostTensor& x = *in[0];
  for (int64_t i = 0; i < x.size(); ++i) out[0][i] = f(x[i]);
  return absl::OkStatus();
}

// Inputs broadcast to the output: f(a, b) or f(a, b, c) at each output element.
template <typename F>
absl::Status MapBroadcast(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out,
                          F f) {
  const std::vector<int64_t>& dims = out[0].shape.dims();
  std::vector<std::vector<int64_t>> source;
  for (const HostTensor* t : in) source.push_back(ops::BroadcastSource(t->shape.dims(), dims));
  for (int64_t i = 0; i < out[0].size(); ++i) {
    if constexpr (std::is_invocable_v<F, double, double, double>) {
      out[0][i] = f((*in[0])[source[0][i]], (*in[1])[source[1][i]], (*in[2])[source[2][i]]);
    } else {
      out[0][i] = f((*in[0])[source[0][i]], (*in[1])[source[1][i]]);
    }
  }
  return absl::OkStatus();
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

absl::Status KernelDiv(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return MapBroadcast(in, out, [](double a, double b) { return a / b; });
}

absl::Status KernelWhere(absl::Span<const HostTensor* const> in, const AttrMap&,
                         absl::Span<HostTensor> out) {
  return MapBroadcast(in, out, [](double c, double a, double b) { return c != 0 ? a : b; });
}

absl::Status KernelCompare(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                           absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(Comparison op, ComparisonOf(attrs));
  return MapBroadcast(in, out, [op](double a, double b) -> double {
    switch (op) {
      case Comparison::kEq:
        return a == b;
      case Comparison::kNe:
        return a != b;
      case Comparison::kLt:
        return a < b;
      case Comparison::kLe:
        return a <= b;
      case Comparison::kGt:
        return a > b;
      case Comparison::kGe:
        return a >= b;
    }
    return 0;
  });
}

absl::Status KernelLogical(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                           absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(bool is_and, IsAnd(attrs));
  return MapBroadcast(in, out, [is_and](double a, double b) -> double {
    return is_and ? (a != 0 && b != 0) : (a != 0 || b != 0);
  });
}

absl::Status KernelSqrt(absl::Span<const HostTensor* const> in, const AttrMap&,
                        absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::sqrt(x); });
}
absl::Status KernelCos(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::cos(x); });
}
absl::Status KernelSin(absl::Span<const HostTensor* const> in, const AttrMap&,
                       absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::sin(x); });
}
absl::Status KernelTanh(absl::Span<const HostTensor* const> in, const AttrMap&,
                        absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return std::tanh(x); });
}
absl::Status KernelSigmoid(absl::Span<const HostTensor* const> in, const AttrMap&,
                           absl::Span<HostTensor> out) {
  return Map1(in, out, Sigmoid);
}
absl::Status KernelRelu(absl::Span<const HostTensor* const> in, const AttrMap&,
                        absl::Span<HostTensor> out) {
  return Map1(in, out, [](double x) { return x > 0 ? x : 0.0; });
}

template <typename F>
absl::Status Map2(absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out, F f) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  for (int64_t i = 0; i < a.size(); ++i) out[0][i] = f(a[i], b[i]);
  return absl::OkStatus();
}

// tanh_grad(y, dy) = dy (1 - y^2), with y = tanh(x).
absl::Status KernelTanhGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                            absl::Span<HostTensor> out) {
  return Map2(in, out, [](double y, double dy) { return dy * (1.0 - y * y); });
}
// sigmoid_grad(y, dy) = dy y (1 - y), with y = sigmoid(x).
absl::Status KernelSigmoidGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                               absl::Span<HostTensor> out) {
  return Map2(in, out, [](double y, double dy) { return dy * y * (1.0 - y); });
}
// relu_grad(x, dy) = dy where x > 0, else 0.
absl::Status KernelReluGrad(absl::Span<const HostTensor* const> in, const AttrMap&,
                            absl::Span<HostTensor> out) {
  return Map2(in, out, [](double x, double dy) { return x > 0 ? dy : 0.0; });
}

// Floats keep their value (the executor's precision rounds what it stores);
// integers take the value truncated toward zero; bool is x != 0.
absl::Status KernelCast(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                        absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(std::string name, attrs.GetString("dtype"));
  LOOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(name));
  if (dtype == DType::kBool) return Map1(in, out, [](double x) -> double { return x != 0; });
  if (!IsFloat(dtype)) return Map1(in, out, [](double x) { return std::trunc(x); });
  return Map1(in, out, [](double x) { return x; });
}

// ---- gradient rules ------------------------------------------------------------------

template <OpKind kGradKind, bool kFromOutput>
Grads GradFunction(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  const TensorId at = kFromOutput ? b.output(0) : b.input(0);
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(kGradKind, {at, dy}, {}, b.GradName(0)));
  return Grads(std::vector<std::optional<TensorId>>(1, dx));
}

// d sqrt(x) = dy / (2 sqrt(x)).
Grads GradSqrt(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId twice,
                        b.Emit1(OpKind::kScale, {b.output(0)}, {{"factor", 2.0}}, "sqrt_twice"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kDiv, {dy, twice}, {}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// d cos(x) = -sin(x) dy; d sin(x) = cos(x) dy.
template <bool kCos>
Grads GradTrig(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId other, b.Emit1(kCos ? OpKind::kSin : OpKind::kCos,
                                                {b.input(0)}, {}, "trig_slope"));
  if (kCos) {
    LOOM_ASSIGN_OR_RETURN(other, b.Emit1(OpKind::kNeg, {other}, {}, "trig_slope"));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kMul, {dy, other}, {}, b.GradName(0)));
  return Grads(std::vector<std::optional<TensorId>>(1, dx));
}

// y = a / b: da = dy / b, db = -dy y / b, each summed back to its input's dims.
Grads GradDiv(GradBuilder& b) {
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId ga, b.Emit1(OpKind::kDiv, {dy, b.input(1)}, {}, "div_grad"));
  LOOM_ASSIGN_OR_RETURN(TensorId gy, b.Emit1(OpKind::kMul, {ga, b.output(0)}, {}, "div_grad"));
  LOOM_ASSIGN_OR_RETURN(TensorId gb, b.Emit1(OpKind::kNeg, {gy}, {}, "div_grad"));
  std::vector<std::optional<TensorId>> out;
  for (auto [i, g] : {std::pair{0, ga}, std::pair{1, gb}}) {
    const std::vector<int64_t> dims = b.input_type(i).shape.dims();
    const std::vector<int64_t> full = b.graph().tensor(g).shape.dims();
    if (dims == full) {
      out.push_back(g);
      continue;
    }
    const int offset = static_cast<int>(full.size() - dims.size());
    std::vector<int64_t> reduced;
    for (int d = 0; d < static_cast<int>(full.size()); ++d) {
      if (d < offset || (dims[d - offset] == 1 && full[d] != 1)) reduced.push_back(d);
    }
    LOOM_ASSIGN_OR_RETURN(TensorId s, b.Emit1(OpKind::kSum, {g}, {{"dims", reduced}}, "div_grad"));
    LOOM_ASSIGN_OR_RETURN(TensorId r,
                          b.Emit1(OpKind::kReshape, {s}, {{"shape", dims}}, b.GradName(i)));
    out.push_back(r);
  }
  return out;
}

// A float cast passes the gradient back in the input's dtype.
Grads GradCast(GradBuilder& b) {
  if (!IsFloat(b.input_type(0).dtype) || !IsFloat(b.graph().tensor(b.output(0)).dtype)) {
    return std::vector<std::optional<TensorId>>{std::nullopt};
  }
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      TensorId dx,
      b.Emit1(OpKind::kCast, {dy}, {{"dtype", std::string(DTypeName(b.input_type(0).dtype))}},
              b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

}  // namespace

void RegisterPointwiseOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, FlopsFn flops,
                 GradFn grad, const char* doc) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, flops, grad, doc, nullptr});
  };
  reg(OpKind::kCast, InferCast, SignatureSame, KernelCast, Flops<0>, GradCast,
      "cast(x) {dtype} -> x in dtype: floats keep their value, integers truncate toward "
      "zero, bool is x != 0")
      .Linear({{0}})
      .LinearIntoFloatsOnly();
  reg(OpKind::kCompare, InferCompare, SignatureBroadcast, KernelCompare, Flops<1>, nullptr,
      "compare(a, b) {op=eq|ne|lt|le|gt|ge} -> bool, dims broadcast");
  reg(OpKind::kCos, InferUnaryFloat, SignatureSame, KernelCos, Flops<4>, GradTrig<true>,
      "cos(x)");
  reg(OpKind::kDiv, InferDiv, SignatureBroadcast, KernelDiv, Flops<1>, GradDiv,
      "div(a, b) -> a / b (one dtype; dims broadcast)")
      .Linear({{0}})
      .Homogeneous({1}, -1);
  reg(OpKind::kLogical, InferLogical, SignatureBroadcast, KernelLogical, Flops<1>, nullptr,
      "logical(a, b) {op=and|or} -> bool, of two bool inputs whose dims broadcast");
  reg(OpKind::kRelu, InferUnaryFloat, SignatureSame, KernelRelu, Flops<1>,
      GradFunction<OpKind::kReluGrad, false>, "relu(x) -> max(x, 0)");
  reg(OpKind::kReluGrad, InferPair, SignatureSame, KernelReluGrad, Flops<1>, nullptr,
      "relu_grad(x, dy) -> dy where x > 0, else 0")
      .Homogeneous({1}, 1);
  reg(OpKind::kSigmoid, InferUnaryFloat, SignatureSame, KernelSigmoid, Flops<4>,
      GradFunction<OpKind::kSigmoidGrad, true>, "sigmoid(x) -> 1 / (1 + exp(-x))");
  reg(OpKind::kSigmoidGrad, InferPair, SignatureSame, KernelSigmoidGrad, Flops<3>, nullptr,
      "sigmoid_grad(y, dy) -> dy * y * (1 - y), y = sigmoid(x)")
      .Homogeneous({1}, 1);
  reg(OpKind::kSin, InferUnaryFloat, SignatureSame, KernelSin, Flops<4>, GradTrig<false>,
      "sin(x)");
  reg(OpKind::kSqrt, InferUnaryFloat, SignatureSame, KernelSqrt, Flops<2>, GradSqrt, "sqrt(x)");
  reg(OpKind::kTanh, InferUnaryFloat, SignatureSame, KernelTanh, Flops<4>,
      GradFunction<OpKind::kTanhGrad, true>, "tanh(x)");
  reg(OpKind::kTanhGrad, InferPair, SignatureSame, KernelTanhGrad, Flops<3>, nullptr,
      "tanh_grad(y, dy) -> dy * (1 - y^2), y = tanh(x)")
      .Homogeneous({1}, 1);
  reg(OpKind::kWhere, InferWhere, SignatureBroadcast, KernelWhere, Flops<1>, nullptr,
      "where(cond, a, b) -> a where cond, else b (cond bool; dims broadcast)")
      .Linear({{1, 2}});
}

}  // namespace loom::ir
