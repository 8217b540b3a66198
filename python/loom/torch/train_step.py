"""The user's own training step, traced whole: `train_step(model, optimizer, batch)`.

Real trainers do more between the forward and the update than a loss and its
backward: a micro-batch loop with its loss scaling, gradient synchronisation by hand
(`dist.all_reduce(p.grad)`), clipping, token-count normalisation. A launcher that
defines `train_step` has Loom trace that function as it is, on one device (a world
of one process) for the model's step and on every rank for the plan:

- the module computes with the step's parameter leaves (capture._parameter_leaf:
  requiring grad and carrying hooks as the launcher set them), swapped in for the
  call; a parameter FSDP manages is gathered for each forward, as FSDP's own
  pre-forward hook does (fsdp.py), and its gradient reduced back to its shard;
- the optimizer the launcher built is the one the step calls, over those leaves and
  the step's optimizer states;
- what runs is tagged by phase for the plan: the model's forward (forward), the
  backward and everything after it up to the update (backward: the program's own
  gradient synchronisation and clipping), the optimizer's step (optimizer).
"""

import contextlib

import torch
import torch.fx.traceback as fx_traceback
from torch.nn.utils.stateless import _reparametrize_module


def _set_phase(phase, own_site=False):
    meta = fx_traceback.get_current_meta().setdefault("custom", {})
    meta["phase"] = phase
    # Ops after the backward (the program's gradient synchronisation) keep their own
    # place; the backward's take their forward op's (lower.Origins).
    if own_site:
        meta["own_site"] = True
    else:
        meta.pop("own_site", None)


@contextlib.contextmanager
def _phases(model, optimizer):
    """Tags the ops of a train_step by phase (the module docstring)."""
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks
    original_backward = torch.autograd.backward

    def backward(tensors, *args, **kwargs):
        _set_phase("backward")
        outs = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        setup_stacktrace_preservation_hooks([t.grad_fn for t in outs if t.grad_fn is not None])
        try:
            return original_backward(tensors, *args, **kwargs)
        finally:
            _set_phase("backward", own_site=True)

    handles = [
        model.register_forward_pre_hook(lambda module, args: _set_phase("forward")),
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: _set_phase("optimizer")),
        optimizer.register_step_post_hook(
            lambda opt, args, kwargs: _set_phase("backward", own_site=True)),
    ]
    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original_backward
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _gathered_in_forward(model, leaves, views):
    """For each forward of the model, the parameters FSDP manages as FSDP computes
    with them (views[fqn](leaf): gathered, their gradient reduced to the shard),
    until the backward that follows it has run: a checkpointed block recomputes its
    forward in the backward on the gathered parameters, as FSDP's pre-backward
    unshard gives them (the same values: nothing updates the shards in between)."""
    if not views:
        yield
        return
    stack = []

    def release():
        while stack:
            stack.pop().__exit__(None, None, None)

    def before(module, args):
        release()
        gathered = {fqn: view(leaves[fqn]) for fqn, view in views.items()}
        ctx = _reparametrize_module(model, gathered, tie_weights=True)
        ctx.__enter__()
        stack.append(ctx)

    original_backward = torch.autograd.backward

    def backward(*args, **kwargs):
        try:
            return original_backward(*args, **kwargs)
        finally:
            release()

    handles = [model.register_forward_pre_hook(before)]
    torch.autograd.backward = backward
    try:
        yield
    finally:
        torch.autograd.backward = original_backward
        for h in handles:
            h.remove()
        release()


@contextlib.contextmanager
def _reparametrized(model, weights):
    """The model computing with `weights`; a pipelined rank's stage modules
    (pipeline.StageModules) each with its own."""
    stages = getattr(model, "_stage_list", None)
    if stages is None:
        with _reparametrize_module(model, weights, tie_weights=True):
            yield
        return
    with contextlib.ExitStack() as stack:
        for st in stages:
            names = [n for n, _ in st.named_parameters()] + [n for n, _ in st.named_buffers()]
            stack.enter_context(_reparametrize_module(
                st, {n: weights[n] for n in names if n in weights}, tie_weights=True))
        yield


def run_train_step(train_step, model, optimizer, weights, views, args, kwargs):
    """Runs the user's `train_step(model, optimizer, batch)` on the step's leaves
    (`weights`: fqn -> parameter leaf or buffer; `views`: fqn -> FSDP's view), the
    batch given as it was (a tuple of positional arguments or a dict)."""
    batch = args if args else dict(kwargs)
    leaves = {fqn: w for fqn, w in weights.items() if fqn in views}
    with _reparametrized(model, weights), _gathered_in_forward(model, leaves, views), \
            _phases(model, optimizer):
        _set_phase("forward")
        train_step(model, optimizer, batch)
