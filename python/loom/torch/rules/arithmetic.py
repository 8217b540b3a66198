"""Pointwise arithmetic, activations and their gradients, comparisons, the 2-norm."""

import torch

from loom.torch.lowered_values import DTYPES, FLOAT, Value
from loom.torch.rules import RULES, _out, rule

aten = torch.ops.aten


# ---- arithmetic -------------------------------------------------------------------

def _binary(L, node, kind, a, b):
    dtype, dims = _out(node)
    return L.emit(kind, [L.tensor(a, dtype), L.tensor(b, dtype)], {}, (dtype, dims))


def _scaled(L, x, alpha, dtype):
    if alpha == 1:
        return x
    if isinstance(x, Value):
        if dtype in FLOAT:
            return L.emit("scale", [L.cast(x, dtype)], {"factor": float(alpha)}, (dtype, x.dims))
        return L.emit("mul", [L.cast(x, dtype), L.fill(alpha, dtype)], {}, (dtype, x.dims))
    return x * alpha


@rule(aten.add.Tensor, aten.add.Scalar, aten.add_.Tensor, aten.add_.Scalar)
def _add(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "add", a, _scaled(L, b, alpha, dtype))


@rule(aten.sub.Tensor, aten.sub.Scalar, aten.sub_.Tensor)
def _sub(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "sub", a, _scaled(L, b, alpha, dtype))


@rule(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "sub", b, _scaled(L, a, alpha, dtype))


@rule(aten.mul.Tensor, aten.mul.Scalar, aten.mul_.Tensor, aten.mul_.Scalar)
def _mul(L, node, a, b):
    dtype, dims = _out(node)
    if isinstance(a, Value) and not isinstance(b, Value) and dtype in FLOAT:
        return L.emit("scale", [L.cast(a, dtype)], {"factor": float(b)}, (dtype, dims))
    if isinstance(b, Value) and not isinstance(a, Value) and dtype in FLOAT:
        return L.emit("scale", [L.cast(b, dtype)], {"factor": float(a)}, (dtype, dims))
    return _binary(L, node, "mul", a, b)


@rule(aten.div.Tensor, aten.div.Scalar, aten.div_.Tensor, aten.div_.Scalar)
def _div(L, node, a, b):
    dtype, dims = _out(node)
    if isinstance(a, Value) and not isinstance(b, Value) and dtype in FLOAT:
        # A division by a number is a scale: a piece scaled differently is reported as
        # scaled by the ratio.
        return L.emit("scale", [L.cast(a, dtype)], {"factor": 1.0 / float(b)}, (dtype, dims))
    return _binary(L, node, "div", a, b)


@rule(aten.reciprocal.default)
def _reciprocal(L, node, x):
    dtype, dims = _out(node)
    return L.emit("div", [L.fill(1.0, dtype, ()), L.cast(x, dtype)], {}, (dtype, dims))


@rule(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _clamp(L, node, x, lo=None, hi=None):
    """min(max(x, lo), hi) as comparisons and selections (clip_grad_norm_'s min(1, c))."""
    if node.target is aten.clamp_max.default:
        lo, hi = None, lo
    dtype, dims = _out(node)
    v = L.cast(x, dtype)
    for bound, op in ((lo, "lt"), (hi, "gt")):
        if bound is None:
            continue
        if isinstance(bound, Value):
            L.unsupported("clamp to a tensor bound")
        past = L.emit("compare", [v, L.fill(bound, dtype)], {"op": op}, ("bool", dims))
        v = L.emit("where", [past, L.fill(bound, dtype, dims), v], {}, (dtype, dims))
    return v


@rule(aten.linalg_vector_norm.default)
def _vector_norm(L, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    """The 2-norm of a whole tensor (clip_grad_norm_'s), sqrt of its sum of squares."""
    return vector_norm_from_squares(L, node, vector_norm_squares(L, node, x, ord, dim))


def vector_norm_squares(L, node, x, ord=2, dim=None, *rest):
    """The first half of a 2-norm: the sum of squares (a rank's partial norm is one:
    norm_partial.py)."""
    if ord != 2 or (dim is not None and len(dim) != len(x.dims)):
        L.unsupported(f"vector norm of order {ord} over dims {dim} (the 2-norm of a whole "
                      "tensor is supported)")
    out_dtype, _ = _out(node)
    return L.emit("sum_squares", [L.cast(x, out_dtype)], {}, (out_dtype, ()))


def vector_norm_from_squares(L, node, squares):
    """The second half: the square root, in the norm's own shape."""
    out_dtype, dims = _out(node)
    return L.reshape(L.emit("sqrt", [squares], {}, (out_dtype, ())), dims)


def _unary(kind):
    def lower(L, node, x, *args, **kwargs):
        dtype, dims = _out(node)
        return L.emit(kind, [L.cast(x, dtype)], {}, (dtype, dims))
    return lower


for _target, _kind in [
        (aten.neg.default, "neg"), (aten.exp.default, "exp"), (aten.log.default, "log"),
        (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"), (aten.cos.default, "cos"),
        (aten.sin.default, "sin"), (aten.tanh.default, "tanh"), (aten.sigmoid.default, "sigmoid"),
        (aten.relu.default, "relu"), (aten.silu.default, "silu")]:
    RULES[_target] = _unary(_kind)


@rule(aten.pow.Tensor_Scalar)
def _pow(L, node, x, exponent):
    dtype, dims = _out(node)
    if exponent == 1:
        return L.cast(x, dtype)
    return L.emit("pow", [L.cast(x, dtype)], {"exponent": float(exponent)}, (dtype, dims))


@rule(aten.gelu.default)
def _gelu(L, node, x, approximate="none"):
    """torch's gelu: the exact one (erf) is Loom's gelu_exact, the tanh approximation
    Loom's gelu."""
    dtype, dims = _out(node)
    return L.emit(_GELU[approximate][0], [L.cast(x, dtype)], {}, (dtype, dims))


@rule(aten.gelu_backward.default)
def _gelu_backward(L, node, dy, x, approximate="none"):
    return L.emit(_GELU[approximate][1], [x, dy], {}, _out(node))


_GELU = {"none": ("gelu_exact", "gelu_exact_grad"), "tanh": ("gelu", "gelu_grad")}


@rule(aten.silu_backward.default)
def _silu_backward(L, node, dy, x):
    return L.emit("silu_grad", [x, dy], {}, _out(node))


@rule(aten.tanh_backward.default)
def _tanh_backward(L, node, dy, y):
    return L.emit("tanh_grad", [y, dy], {}, _out(node))


@rule(aten.sigmoid_backward.default)
def _sigmoid_backward(L, node, dy, y):
    return L.emit("sigmoid_grad", [y, dy], {}, _out(node))


@rule(aten.threshold_backward.default)
def _threshold_backward(L, node, dy, x, threshold):
    if threshold != 0:
        L.unsupported(f"threshold_backward with threshold {threshold}")
    return L.emit("relu_grad", [x, dy], {}, _out(node))


@rule(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(L, node, cond, a, b):
    dtype, dims = _out(node)
    return L.emit("where", [L.cast(cond, "bool"), L.tensor(a, dtype), L.tensor(b, dtype)], {},
                  (dtype, dims))


def _compare(op):
    def lower(L, node, a, b):
        dtype, dims = _out(node)
        va = node.args[0].meta["val"] if isinstance(node.args[0], torch.fx.Node) else a
        vb = node.args[1].meta["val"] if isinstance(node.args[1], torch.fx.Node) else b
        common = DTYPES[torch.result_type(va, vb)]
        return L.emit("compare", [L.tensor(a, common), L.tensor(b, common)], {"op": op},
                      (dtype, dims))
    return lower


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _overload in ("Tensor", "Scalar"):
        RULES[getattr(getattr(aten, _op), _overload)] = _compare(_op)


def _logical(op):
    def lower(L, node, a, b):
        if a.dtype != "bool" or b.dtype != "bool":
            L.unsupported(f"bitwise {op} of {a.dtype} and {b.dtype} tensors (only of bools)")
        return L.emit("logical", [a, b], {"op": op}, _out(node))
    return lower


RULES[aten.bitwise_and.Tensor] = _logical("and")
RULES[aten.logical_and.default] = _logical("and")
RULES[aten.bitwise_or.Tensor] = _logical("or")
RULES[aten.logical_or.default] = _logical("or")
