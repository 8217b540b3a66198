"""Foreach ops (a foreach optimizer's, clip_grad_norm_'s) and the optimizers' fused
pointwise updates."""

import torch

from loom.torch.rules import RULES, _out, rule

aten = torch.ops.aten


# ---- foreach ops (a foreach optimizer's, clip_grad_norm_'s): each element by its
# op's own rule ----------------------------------------------------------------------

def is_foreach_update(node):
    """An in-place foreach op (`_foreach_mul_`): it updates the tensors of its first
    argument and returns nothing."""
    name = getattr(getattr(node, "target", None), "__name__", "")
    return node.op == "call_function" and name.startswith("_foreach_") and \
        name.split(".")[0].endswith("_") and isinstance(node.args[0], (list, tuple))


class _Element:
    """Element i of a foreach node, as an op's rule reads a node: its name, the value
    torch computed for it (the updated tensor's, for an in-place update)."""

    def __init__(self, node, i, val):
        self.name = f"{node.name}.{i}"
        self.target = node.target
        self.meta = {"val": val}
        self.args = node.args
        self.kwargs = node.kwargs


def base_of(node):
    """The elementwise op a foreach op applies: `_foreach_addcdiv_` -> "addcdiv"."""
    return node.target.__name__.split(".")[0][len("_foreach_"):].rstrip("_")


def _foreach_rule(node):
    """The rule of the elementwise op a foreach op applies (`_foreach_addcdiv_` ->
    addcdiv's)."""
    base = base_of(node)
    if base == "norm":  # _foreach_norm(tensors, ord): each tensor's vector norm
        return RULES[aten.linalg_vector_norm.default]
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    for overload in packet.overloads():
        r = RULES.get(getattr(packet, overload))
        if r is not None:
            return r
    return None


def lower_foreach(L, node, args, kwargs):
    """A foreach op: its op on each element (list arguments indexed, the others as
    they are); an in-place one rebinds each element's node to its new value."""
    rule_of = _foreach_rule(node)
    if rule_of is None:
        L.unsupported(f"foreach op '{node.target}' has no elementwise Loom rule")
    count = len(args[0])
    update = is_foreach_update(node)
    vals = node.meta.get("val")
    out = []
    marks = []
    for i in range(count):
        def pick(x):
            return x[i] if isinstance(x, (list, tuple)) and len(x) == count else x
        element_args = [pick(a) for a in args]
        element_kwargs = {k: pick(v) for k, v in kwargs.items()}
        source = node.args[0][i]
        val = vals[i] if isinstance(vals, (list, tuple)) and not update else source.meta["val"]
        start = L.ops_made()
        partial = getattr(L, "partial_norm_element", None)
        if base_of(node) == "norm" and partial is not None and partial(node, i):
            out.append(partial(node, i, element_args))
        else:
            out.append(rule_of(L, _Element(node, i, val), *element_args, **element_kwargs))
        marks.append((start, L.ops_made()))
    L.foreach_elements[node] = marks
    if update:
        for source, value in zip(node.args[0], out):
            L.rebind(source, value)
        return None
    return out


@rule(aten.lerp_.Scalar, aten.lerp.Scalar)
def _lerp(L, node, a, b, weight):
    dtype, dims = _out(node)
    diff = L.emit("sub", [b, a], {}, (dtype, dims))
    step = L.emit("scale", [diff], {"factor": float(weight)}, (dtype, dims))
    return L.emit("add", [a, step], {}, (dtype, dims))


@rule(aten.addcmul_.default, aten.addcmul.default)
def _addcmul(L, node, a, t1, t2, value=1):
    dtype, dims = _out(node)
    prod = L.emit("mul", [t1, t2], {}, (dtype, dims))
    if value != 1:
        prod = L.emit("scale", [prod], {"factor": float(value)}, (dtype, dims))
    return L.emit("add", [a, prod], {}, (dtype, dims))


@rule(aten.addcdiv_.default, aten.addcdiv.default)
def _addcdiv(L, node, a, t1, t2, value=1):
    dtype, dims = _out(node)
    q = L.emit("div", [t1, t2], {}, (dtype, dims))
    if value != 1:
        q = L.emit("scale", [q], {"factor": float(value)}, (dtype, dims))
    return L.emit("add", [a, q], {}, (dtype, dims))
