"""Mixture-of-experts blocks as Loom's routing ops.

Hugging Face's sparse MoE blocks (Mixtral) route tokens with data-dependent shapes:
`nonzero` finds the experts a batch hits, `where` the tokens each takes, `index_add_`
puts the results back. A trace cannot follow a shape that depends on the data, and
a proof of one routing would prove nothing of the next batch. What the block
computes is, in Hugging Face's own words, "strictly equivalent to standard MoE with
full capacity (no dropped tokens)": the router's softmax, its top k experts per token
renormalised, every expert's MLP on the tokens routed to it, their outputs weighted
and summed per token. That is Loom's topk_gate, moe_dispatch (a capacity of every
token: none is dropped) and moe_combine, whose semantics Loom proves with; so while
a step is traced, the block runs as those ops (torch custom ops `loom::topk_gate`,
`loom::moe_dispatch`, `loom::moe_combine` and their gradients, lowered one to one),
around the user's own router and expert modules, which keep their parallel styles.

Loom's CPU executor running the captured plan is compared with torch running Hugging
Face's own sparse block (the tests do), which checks the substitution numerically.
"""

import contextlib

import torch

# ---- the slot rule (ir/ops/moe.cc): token t's j-th expert takes that expert's next slot


def _slots(indices, experts, capacity, groups=1):
    """(expert, slot column) of each (token, j) pair, the tokens in `groups` contiguous
    groups each with its own `capacity` slots per expert; slot -1 when dropped."""
    per_group = indices.shape[0] // groups
    out = []
    for t in range(indices.shape[0]):
        if t % per_group == 0:
            taken = [0] * experts  # a new group starts
        base = (t // per_group) * capacity
        row = []
        for j in range(indices.shape[1]):
            e = int(indices[t, j])
            row.append((e, base + taken[e] if taken[e] < capacity else -1))
            taken[e] += 1
        out.append(row)
    return out


@torch.library.custom_op("loom::topk_gate", mutates_args=())
def topk_gate(logits: torch.Tensor, k: int, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.softmax(logits, dim=-1)
    weights, indices = torch.topk(scores, k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, indices


@topk_gate.register_fake
def _(logits, k, normalize):
    t = logits.shape[0]
    return logits.new_empty((t, k)), logits.new_empty((t, k), dtype=torch.int64)


@torch.library.custom_op("loom::topk_gate_grad", mutates_args=())
def topk_gate_grad(logits: torch.Tensor, indices: torch.Tensor, dweights: torch.Tensor, k: int,
                   normalize: bool) -> torch.Tensor:
    scores = torch.softmax(logits, dim=-1)
    chosen = torch.gather(scores, 1, indices)
    z = chosen.sum(dim=-1, keepdim=True)
    dot = (dweights * chosen).sum(dim=-1, keepdim=True)
    per = (dweights - dot / z) / z if normalize else dweights
    ds = torch.zeros_like(scores).scatter_add(1, indices, per)
    inner = (ds * scores).sum(dim=-1, keepdim=True)
    return scores * (ds - inner)


@topk_gate_grad.register_fake
def _(logits, indices, dweights, k, normalize):
    return torch.empty_like(logits)


def _topk_gate_backward(ctx, dweights, dindices):
    logits, indices = ctx.saved_tensors
    if dweights is None:
        return None, None, None
    return topk_gate_grad(logits, indices, dweights, ctx.k, ctx.normalize), None, None


def _topk_gate_setup(ctx, inputs, output):
    logits, k, normalize = inputs
    ctx.save_for_backward(logits, output[1])
    ctx.k, ctx.normalize = k, normalize


topk_gate.register_autograd(_topk_gate_backward, setup_context=_topk_gate_setup)


@torch.library.custom_op("loom::moe_dispatch", mutates_args=())
def moe_dispatch(x: torch.Tensor, indices: torch.Tensor, experts: int,
                 capacity: int, groups: int) -> torch.Tensor:
    out = x.new_zeros((experts, groups * capacity, x.shape[1]))
    for t, row in enumerate(_slots(indices, experts, capacity, groups)):
        for e, s in row:
            if s >= 0:
                out[e, s] = x[t]
    return out


@moe_dispatch.register_fake
def _(x, indices, experts, capacity, groups):
    return x.new_empty((experts, groups * capacity, x.shape[1]))


@torch.library.custom_op("loom::moe_dispatch_grad", mutates_args=())
def moe_dispatch_grad(dy: torch.Tensor, indices: torch.Tensor, experts: int, capacity: int,
                      tokens: int, groups: int) -> torch.Tensor:
    out = dy.new_zeros((tokens, dy.shape[2]))
    for t, row in enumerate(_slots(indices, experts, capacity, groups)):
        for e, s in row:
            if s >= 0:
                out[t] += dy[e, s]
    return out


@moe_dispatch_grad.register_fake
def _(dy, indices, experts, capacity, tokens, groups):
    return dy.new_empty((tokens, dy.shape[2]))


def _dispatch_backward(ctx, dy):
    indices, = ctx.saved_tensors
    return (moe_dispatch_grad(dy, indices, ctx.experts, ctx.capacity, ctx.tokens, ctx.groups),
            None, None, None, None)


def _dispatch_setup(ctx, inputs, output):
    x, indices, experts, capacity, groups = inputs
    ctx.save_for_backward(indices)
    ctx.experts, ctx.capacity, ctx.tokens, ctx.groups = experts, capacity, x.shape[0], groups


moe_dispatch.register_autograd(_dispatch_backward, setup_context=_dispatch_setup)


@torch.library.custom_op("loom::moe_combine", mutates_args=())
def moe_combine(expert_out: torch.Tensor, weights: torch.Tensor,
                indices: torch.Tensor, groups: int) -> torch.Tensor:
    experts, columns, d = expert_out.shape
    out = expert_out.new_zeros((indices.shape[0], d))
    for t, row in enumerate(_slots(indices, experts, columns // groups, groups)):
        for j, (e, s) in enumerate(row):
            if s >= 0:
                out[t] += weights[t, j] * expert_out[e, s]
    return out


@moe_combine.register_fake
def _(expert_out, weights, indices, groups):
    return expert_out.new_empty((indices.shape[0], expert_out.shape[2]))


@torch.library.custom_op("loom::moe_combine_grad", mutates_args=())
def moe_combine_grad(expert_out: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor,
                     dy: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    experts, columns, d = expert_out.shape
    d_out = torch.zeros_like(expert_out)
    d_weights = torch.zeros_like(weights)
    for t, row in enumerate(_slots(indices, experts, columns // groups, groups)):
        for j, (e, s) in enumerate(row):
            if s >= 0:
                d_out[e, s] += weights[t, j] * dy[t]
                d_weights[t, j] = (dy[t] * expert_out[e, s]).sum()
    return d_out, d_weights


@moe_combine_grad.register_fake
def _(expert_out, weights, indices, dy, groups):
    return torch.empty_like(expert_out), torch.empty_like(weights)


def _combine_backward(ctx, dy):
    expert_out, weights, indices = ctx.saved_tensors
    d_out, d_weights = moe_combine_grad(expert_out, weights, indices, dy, ctx.groups)
    return d_out, d_weights, None, None


def _combine_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:3])
    ctx.groups = inputs[3]


moe_combine.register_autograd(_combine_backward, setup_context=_combine_setup)


# ---- the blocks -----------------------------------------------------------------------

def _mixtral_forward(self, hidden_states):
    """MixtralSparseMoeBlock.forward as Loom's routing ops (the module docstring)."""
    return _routed(self, hidden_states, normalize=True)


def _qwen3_moe_forward(self, hidden_states):
    """Qwen3MoeSparseMoeBlock.forward: Mixtral's, its top k renormalised only where
    the config says so (norm_topk_prob)."""
    return _routed(self, hidden_states, normalize=bool(self.norm_topk_prob))


def _routed(self, hidden_states, normalize):
    batch, seq, width = hidden_states.shape
    x = hidden_states.view(-1, width)
    router_logits = self.gate(x)
    # Hugging Face: softmax in float32, the top k, renormalised, cast back.
    weights, indices = torch.ops.loom.topk_gate(router_logits.float(), self.top_k, normalize)
    weights = weights.to(x.dtype)
    tokens = x.shape[0]
    # Every token has a slot (full capacity): the tokens in the groups the batch's
    # data-parallel ranks take, each routed on its own, as the ranks route theirs.
    groups = _GROUPS[-1] if _GROUPS and tokens % _GROUPS[-1] == 0 else 1
    routed = torch.ops.loom.moe_dispatch(x, indices, self.num_experts, tokens // groups, groups)
    outputs = torch.stack([self.experts[e](routed[e]) for e in range(self.num_experts)])
    y = torch.ops.loom.moe_combine(outputs, weights, indices, groups)
    return y.view(batch, seq, width), router_logits


def _blocks():
    out = []
    try:
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
        out.append((MixtralSparseMoeBlock, _mixtral_forward))
    except ImportError:
        pass
    try:
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
        out.append((Qwen3MoeSparseMoeBlock, _qwen3_moe_forward))
    except ImportError:
        pass
    return out


_GROUPS = []  # the routing groups of the step being traced (routed_as_loom_ops)


@contextlib.contextmanager
def routed_as_loom_ops(groups=1):
    """While tracing: the MoE blocks Loom knows run as its routing ops, the tokens of
    each call in `groups` contiguous groups routed on their own (the step on one
    device routes as many groups as the data-parallel ranks route: a rank's routing is
    one group of it; with every token kept, grouping changes no value)."""
    _GROUPS.append(groups)
    saved = []
    for cls, forward in _blocks():
        saved.append((cls, cls.forward))
        cls.forward = forward
    try:
        yield
    finally:
        _GROUPS.pop()
        for cls, forward in saved:
            cls.forward = forward
