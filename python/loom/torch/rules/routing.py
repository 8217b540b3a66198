"""Loom's mixture-of-experts routing ops (moe.py: Hugging Face's MoE blocks while
traced)."""

import torch

from loom.torch.rules import _out, _out_n, rule

aten = torch.ops.aten


# ---- Loom's routing ops (moe.py: Hugging Face's MoE blocks while traced) ----------------

from loom.torch import moe as _moe  # noqa: E402  (registers torch.ops.loom.*)

_LOOM = torch.ops.loom


@rule(_LOOM.topk_gate.default)
def _topk_gate(L, node, logits, k, normalize):
    attrs = {"k": int(k), "score": "softmax", "normalize": int(bool(normalize))}
    return L.emit_n("topk_gate", [logits], attrs, [_out_n(node, 0), _out_n(node, 1)])


@rule(_LOOM.topk_gate_grad.default)
def _topk_gate_grad(L, node, logits, indices, dweights, k, normalize):
    attrs = {"k": int(k), "score": "softmax", "normalize": int(bool(normalize))}
    return L.emit("topk_gate_grad", [logits, indices, dweights], attrs, _out(node))


def _groups_attr(groups):
    return {"groups": int(groups)}


@rule(_LOOM.moe_dispatch.default)
def _moe_dispatch(L, node, x, indices, experts, capacity, groups):
    return L.emit("moe_dispatch", [x, indices],
                  {"experts": int(experts), "capacity": int(capacity), **_groups_attr(groups)},
                  _out(node))


@rule(_LOOM.moe_dispatch_grad.default)
def _moe_dispatch_grad(L, node, dy, indices, experts, capacity, tokens, groups):
    return L.emit("moe_dispatch_grad", [dy, indices],
                  {"experts": int(experts), "capacity": int(capacity), "tokens": int(tokens),
                   **_groups_attr(groups)},
                  _out(node))


@rule(_LOOM.moe_combine.default)
def _moe_combine(L, node, expert_out, weights, indices, groups):
    return L.emit("moe_combine", [expert_out, weights, indices], _groups_attr(groups),
                  _out(node))


@rule(_LOOM.moe_combine_grad.default)
def _moe_combine_grad(L, node, expert_out, weights, indices, dy, groups):
    return L.emit_n("moe_combine_grad", [expert_out, weights, indices, dy],
                    _groups_attr(groups), [_out_n(node, 0), _out_n(node, 1)])
