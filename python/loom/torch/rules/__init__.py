"""The lowering's rules: one function per ATen op (overload), returning a Value, a
list of Values or a Python number, registered here by the modules of this package,
each a family of ops (loom/torch/lower.py applies them)."""

from loom.torch.lowered_values import _dims, _dtype

RULES = {}


def rule(*targets):
    def register(fn):
        for t in targets:
            RULES[t] = fn
        return fn
    return register


def _out(node):
    val = node.meta["val"]
    return _dtype(val), _dims(val)


def _out_n(node, i):
    val = node.meta["val"][i]
    return _dtype(val), _dims(val)
