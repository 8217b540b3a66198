"""Cross-entropy as the ATen ops torch's loss parallel runs.

torch computes a cross-entropy as `_log_softmax` then `nll_loss_forward`, and its
backward as `nll_loss_backward` then `_log_softmax_backward_data`. Under loss
parallel (torch.distributed.tensor.parallel.loss_parallel, with the logits split
along the vocabulary) DTensor replaces the four with its own decompositions over the
rank's vocabulary piece: a row maximum and a sum of exponentials, each all-reduced
over the pieces, for the log-softmax; the picked log-probability masked to the piece
and all-reduced; and one fused backward, (one-hot(-1) + exp(log-probabilities)) times
the incoming gradient, that leaves the log-softmax backward a copy.

A rank's program is matched to the model's step op by op, so the step (and every
rank that computes a whole vocabulary) is traced with the same decompositions, less
the collectives and the masking: the same ATen ops on the same operands. The
backward is fused where torch fuses it, where nll_loss_backward reads a
log_softmax's output; anything else (class weights, more than two dims) keeps
torch's own ops.

`Notes` records what the lowering needs to know of these nodes: which are
log-softmax outputs and fused gradients, and which sum is a loss's token count
(plan.py sums it over the data-parallel ranks).
"""

import dataclasses

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

aten = torch.ops.aten

_NONE, _MEAN, _SUM = 0, 1, 2  # torch's loss reductions


@dataclasses.dataclass
class Notes:
    log_softmax: set = dataclasses.field(default_factory=set)  # FX node names
    fused: set = dataclasses.field(default_factory=set)
    counts: set = dataclasses.field(default_factory=set)


def node_name(t):
    """The FX node of the traced tensor `t` (inside make_fx), or None."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
    mode = get_proxy_mode()
    if mode is None or not isinstance(t, torch.Tensor):
        return None
    try:
        proxy = get_proxy_slot(t, mode.tracer).proxy
    except (KeyError, AssertionError, RuntimeError, AttributeError):
        return None
    return proxy.node.name


def decompositions(notes):
    """The decomposition table for make_fx (the module docstring)."""

    def log_softmax(x, dim, half_to_float):
        if half_to_float or x.numel() == 0:
            return NotImplemented
        computation, result_dtype = elementwise_dtypes(
            x, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        x = x.to(dtype=computation, memory_format=torch.contiguous_format)
        shifted = x - torch.amax(x, dim, keepdim=True)
        shifted_sumexp = torch.sum(torch.exp(shifted), dim, keepdim=True)
        result = (shifted - torch.log(shifted_sumexp)).to(result_dtype)
        notes.log_softmax.add(node_name(result))
        return result

    def nll_loss_forward(x, target, weight, reduction, ignore_index):
        if weight is not None or x.dim() not in (1, 2):
            return NotImplemented
        channel_dim = 0 if x.dim() < 2 else 1
        safe_target = torch.where(target != ignore_index, target, 0)
        picked = torch.gather(x, channel_dim, safe_target.unsqueeze(channel_dim))
        result = -picked.squeeze(channel_dim)
        result = torch.where(target != ignore_index, result, 0)
        if reduction == _NONE and x.dim() > 1:
            return result, x.new_full((), 0.0)
        count = (target != ignore_index).sum()
        notes.counts.add(node_name(count))
        total_weight = count.to(x)
        if reduction == _SUM:
            result = result.sum()
        elif reduction == _MEAN:
            result = result.sum() / total_weight
        return result, total_weight

    def nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index,
                          total_weight):
        if weight is not None or x.dim() != 2 or node_name(x) not in notes.log_softmax:
            return NotImplemented
        channel_dim = 1
        if reduction == _MEAN:
            grad_output = grad_output / total_weight
        target = target.unsqueeze(channel_dim)
        safe_target = torch.where(target != ignore_index, target, 0)
        grad_input = torch.zeros_like(x)
        safe_target = safe_target.squeeze(channel_dim).flatten()
        rows = torch.arange(safe_target.shape[0], device=safe_target.device)
        grad_input[rows, safe_target] = -1.0
        if grad_input.dim() > grad_output.dim() > 0:
            grad_output = grad_output.unsqueeze(channel_dim)
        grad_output = torch.where(target != ignore_index, grad_output, 0)
        result = (grad_input + torch.exp(x)) * grad_output
        notes.fused.add(node_name(result))
        return result

    def log_softmax_backward(grad_output, output, dim, input_dtype):
        if node_name(grad_output) not in notes.fused:
            return NotImplemented
        return grad_output.to(input_dtype)

    return {aten._log_softmax.default: log_softmax,
            aten.nll_loss_forward.default: nll_loss_forward,
            aten.nll_loss_backward.default: nll_loss_backward,
            aten._log_softmax_backward_data.default: log_softmax_backward}
