"""Complex tensors."""

import torch

from loom.torch.lowered_values import COMPLEX, Value
from loom.torch.rules import _out, rule

aten = torch.ops.aten


# ---- complex tensors ---------------------------------------------------------------
# A complex tensor is held as its real view: torch.view_as_real's layout, its real and
# imaginary parts along a last dim of 2 (_dims). The conversions between the two are
# then re-labels, and complex arithmetic is written with real ops on the parts
# (complex rotary embeddings: torch.polar's table times view_as_complex of the
# queries and keys, and their backward by its conjugate).


def is_complex(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype in COMPLEX


def _parts(L, z):
    """The real and imaginary parts of complex `z` (its real view), each [..., 1]."""
    last = len(z.dims) - 1
    dims = tuple(z.dims[:-1]) + (1,)
    return [L.emit("slice", [z], {"dim": last, "begin": i, "end": i + 1}, (z.dtype, dims))
            for i in (0, 1)]


@rule(aten.view_as_complex.default, aten.view_as_real.default)
def _complex_view(L, node, x):
    return x


@rule(aten._conj.default, aten.conj_physical.default, aten.conj.default)
def _conj(L, node, z):
    re, im = _parts(L, z)
    neg = L.emit("neg", [im], {}, (im.dtype, im.dims))
    return L.emit("concat", [re, neg], {"dim": len(z.dims) - 1}, _out(node))


def complex_mul(L, node, a, b):
    """a * b with a or b complex: (ar br - ai bi) + i (ar bi + ai br); a real factor
    scales both parts."""
    dtype, dims = _out(node)
    complex_a, complex_b = (is_complex(x) for x in node.args[:2])
    if not (complex_a and complex_b):
        z, r = (a, b) if complex_a else (b, a)
        if isinstance(r, Value):
            r = L.reshape(L.cast(r, dtype), tuple(r.dims) + (1,))
            return L.emit("mul", [L.cast(z, dtype), r], {}, (dtype, dims))
        return L.emit("scale", [L.cast(z, dtype)], {"factor": float(r)}, (dtype, dims))
    (ar, ai), (br, bi) = _parts(L, L.cast(a, dtype)), _parts(L, L.cast(b, dtype))
    part = tuple(dims[:-1]) + (1,)

    def mul(x, y):
        return L.emit("mul", [x, y], {}, (dtype, part))
    re = L.emit("sub", [mul(ar, br), mul(ai, bi)], {}, (dtype, part))
    im = L.emit("add", [mul(ar, bi), mul(ai, br)], {}, (dtype, part))
    return L.emit("concat", [re, im], {"dim": len(dims) - 1}, (dtype, dims))


# What a complex tensor may go through: re-labels and views whose dims are the
# complex tensor's (non-negative: the real view has one dim more), its
# conversions, its conjugate and products.
_COMPLEX_OPS = {aten.view_as_complex.default, aten.view_as_real.default, aten._conj.default,
                aten.conj_physical.default, aten.conj.default, aten.mul.Tensor,
                aten.detach.default, aten.alias.default, aten.clone.default,
                aten.contiguous.default, aten.view.default, aten._unsafe_view.default,
                aten.reshape.default, aten.unsqueeze.default, aten.squeeze.dim,
                aten.slice.Tensor, aten.select.int, aten.expand.default}
_COMPLEX_DIM_ARG = {aten.slice.Tensor, aten.select.int}


def check_complex(L, node):
    """Refuses what Loom does not write for complex tensors (the module comment)."""
    if node.target is aten._to_copy.default and is_complex(node) and is_complex(node.args[0]):
        return  # complex64 <-> complex128: a cast of the parts
    if node.target not in _COMPLEX_OPS:
        L.unsupported(f"'{node.target}' of a complex tensor (complex tensors are supported "
                      "through view_as_complex, view_as_real, views, conj and products)")
    if node.target in _COMPLEX_DIM_ARG and is_complex(node.args[0]) and len(node.args) > 1 \
            and isinstance(node.args[1], int) and node.args[1] < 0:
        L.unsupported(f"'{node.target}' of a complex tensor along a negative dim")
