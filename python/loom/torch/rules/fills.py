"""Constants and positions: fills, scalars, ranges."""

import torch

from loom.torch.rules import _out, rule

aten = torch.ops.aten


# ---- constants and positions --------------------------------------------------------

def _fill_like(L, node, value):
    dtype, dims = _out(node)
    return L.emit("fill", [], {"shape": list(dims), "value": float(value), "dtype": dtype},
                  (dtype, dims))


@rule(aten.full.default, aten.new_full.default)
def _full(L, node, *args, **kwargs):
    value = args[-1] if node.target is aten.full.default else args[2]
    return _fill_like(L, node, value)


@rule(aten.ones_like.default, aten.new_ones.default, aten.ones.default)
def _ones(L, node, *args, **kwargs):
    return _fill_like(L, node, 1.0)


@rule(aten.zeros_like.default, aten.new_zeros.default, aten.zeros.default)
def _zeros(L, node, *args, **kwargs):
    return _fill_like(L, node, 0.0)


@rule(aten.scalar_tensor.default)
def _scalar_tensor(L, node, value, **kwargs):
    return _fill_like(L, node, value)


@rule(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(L, node, *args, **kwargs):
    if node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    dtype, dims = _out(node)
    return L.emit("arange", [], {"start": start, "step": step, "size": dims[0], "dtype": dtype},
                  (dtype, dims))
