"""What re-labels a value without computing anything: ops that only copy or view
their operand as it is (a clone, a detach, a view of the same shape, DTensor's
from_local and to_local), and the in-place c10d all-reduce, which is the identity
in the step on one device. Matching a rank's ops to the step's looks through them."""

import operator

import torch

aten = torch.ops.aten

C10D_ALL_REDUCE = torch.ops.c10d.allreduce_.default


def is_identity(node):
    """An op that only copies or re-labels its operand: a clone, a detach, a view or
    a cast that keeps the shape and dtype (DTensor's from_local and to_local too)."""
    if node.op != "call_function":
        return False
    if node.target in (aten.alias.default, aten.detach.default, aten.clone.default,
                       aten.contiguous.default, aten.lift_fresh_copy.default):
        return True
    if node.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                       aten._to_copy.default):
        src = node.args[0]
        if not isinstance(src, torch.fx.Node):
            return False
        a, b = src.meta.get("val"), node.meta.get("val")
        return a is not None and b is not None and tuple(a.shape) == tuple(b.shape) and \
            a.dtype == b.dtype
    return False


def canonical(node):
    """`node`'s operand chain followed through identity ops (and, in the step on one
    device, through an in-place all-reduce, which is the identity there)."""
    while node is not None:
        if is_identity(node):
            node = node.args[0]
            continue
        source = _c10d_all_reduced(node)
        if source is None:
            return node
        node = source
    return node


def _c10d_all_reduced(node):
    """The tensor an in-place c10d all-reduce read, where `node` is its result
    (getitem(getitem(allreduce_(tensors, ...), 0), i)); else None."""
    if not (isinstance(node, torch.fx.Node) and node.target is operator.getitem):
        return None
    inner = node.args[0]
    if not (isinstance(inner, torch.fx.Node) and inner.target is operator.getitem and
            inner.args[1] == 0 and isinstance(inner.args[0], torch.fx.Node) and
            inner.args[0].target is C10D_ALL_REDUCE):
        return None
    tensors = inner.args[0].args[0]
    return tensors[node.args[1]] if isinstance(tensors, (list, tuple)) else None
