"""Tracing one training step of a torch.nn.Module: forward, loss, backward and the
optimizer's own update, as the ATen ops torch runs (make_fx).

The step is traced as one function of flat inputs: the parameters, the buffers,
the optimizer's state and the batch's tensors, in that order. Parameters and
states are explicit graph inputs (torch.func.functional_call for the forward, the
optimizer's own step on traced tensors swapped into its param groups), so the
graph says which input every op reads. Every node carries the module that ran it
(forward hooks), its phase, and the Python stack of the user's code; backward
nodes get their forward op's module and stack through autograd's sequence numbers.

The optimizer's step counter is a Python number in the trace: torch reads it with
.item() to compute the bias corrections, which a trace cannot do, so the count the
step will have is given to it instead; the update's arithmetic is torch's own.
"""

import collections
import contextlib
import dataclasses
import os
import re
import sys
import traceback

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree

from loom.torch import cross_entropy
from loom.torch.errors import CaptureError

SUPPORTED_OPTIMIZERS = ("Adam", "AdamW", "SGD")
_THIS_FILE = os.path.join("loom", "torch", "capture.py")


@dataclasses.dataclass
class Placeholder:
    """One input of the traced step."""
    kind: str          # "parameter", "buffer", "state" or "input"
    name: str          # its tensor name in Loom's graph
    fqn: str = ""      # the parameter or buffer it belongs to
    value: object = None  # the tensor given to the trace (a DTensor's local tensor)
    dtensor: object = None  # the DTensor's spec (mesh, placements, global shape)


@dataclasses.dataclass
class Trace:
    """A traced step: the FX graph and what its inputs and outputs are."""
    module: torch.fx.GraphModule
    placeholders: list   # Placeholder, one per FX placeholder, in order
    outputs: list        # (kind, name): ("loss", "loss"), ("parameter", fqn), ("state", name)
    optimizer: dict      # {"class": ..., "hyper": {...}, "step": k}
    model_class: str
    fake: bool
    fn: object = None      # the traced function of the flat inputs, to run it eagerly
    inputs: list = None    # the flat inputs it was traced with
    notes: object = None   # cross_entropy.Notes of its decomposed cross-entropies
    param_aliases: dict = None  # another name of a shared parameter -> its name here


def _layer_of(path):
    """The repeated block a module path belongs to: `model.layers.3.mlp` -> 3."""
    m = re.search(r"(?:^|\.)(?:layers|h|blocks|block|layer)\.(\d+)(?:\.|$)", path or "")
    return int(m.group(1)) if m else -1


class _ModuleTagger:
    """Forward hooks that record, in the FX node metadata torch copies to every node
    (fx_traceback's current meta, preserved under preserve_node_meta), the path of
    the innermost module running."""

    def __init__(self, root):
        self._paths = {m: n for n, m in root.named_modules()}
        self._stack = []
        self._handles = []
        self._recomputes = 0
        self._recompute_depth = None
        for m in root.modules():
            self._handles.append(m.register_forward_pre_hook(self._enter))
            self._handles.append(m.register_forward_hook(self._leave))

    def _meta(self):
        return fx_traceback.get_current_meta().setdefault("custom", {})

    def _enter(self, module, args):
        meta = self._meta()
        if meta.get("phase") == "backward" and "recompute" not in meta:
            # A module that runs its forward during the backward: activation
            # checkpointing recomputing it. Its ops are tagged with this recompute.
            self._recomputes += 1
            meta["recompute"] = self._recomputes
            self._recompute_depth = len(self._stack)
        self._stack.append(self._paths.get(module, ""))
        meta["module"] = self._stack[-1]

    def _leave(self, module, args, output):
        self._stack.pop()
        meta = self._meta()
        if len(self._stack) == self._recompute_depth:
            meta.pop("recompute", None)
            self._recompute_depth = None
        if self._stack:
            meta["module"] = self._stack[-1]
        else:
            meta.pop("module", None)

    def close(self):
        for h in self._handles:
            h.remove()


def _set_phase(phase, module=None):
    meta = fx_traceback.get_current_meta().setdefault("custom", {})
    meta["phase"] = phase
    if module is None:
        meta.pop("module", None)
    else:
        meta["module"] = module


def _check_optimizer(opt):
    name = type(opt).__name__
    if name not in SUPPORTED_OPTIMIZERS:
        raise CaptureError(f"optimizer {name} is not supported (supported: "
                           f"{', '.join(SUPPORTED_OPTIMIZERS)})")
    if len(opt.param_groups) != 1:
        raise CaptureError(f"optimizer {name} has {len(opt.param_groups)} parameter groups; "
                           "one is supported")
    group = opt.param_groups[0]
    for option in ("fused", "capturable", "differentiable"):
        if group.get(option):
            raise CaptureError(f"optimizer {name} with {option}=True is not supported "
                               f"(pass {option}=False)")
    return name, group


def _state_keys(name, group):
    if name in ("Adam", "AdamW"):
        keys = ["exp_avg", "exp_avg_sq"]
        if group.get("amsgrad"):
            keys.append("max_exp_avg_sq")
        return keys
    if group.get("momentum", 0):
        return ["momentum_buffer"]
    return []


@contextlib.contextmanager
def _step_count(counts):
    """torch.optim's Adam reads its step count with .item(); a trace gives it the count."""
    import torch.optim.adam as adam_module
    import torch.optim.optimizer as optimizer_module
    original = optimizer_module._get_value
    ids = {id(t): v for t, v in counts}

    def get_value(x):
        return ids[id(x)] if id(x) in ids else original(x)

    adam_module._get_value = get_value
    try:
        yield
    finally:
        adam_module._get_value = original


def _dtensor_spec(t):
    from torch.distributed.tensor import DTensor
    return t._spec if isinstance(t, DTensor) else None


def _local(t):
    from torch.distributed.tensor import DTensor
    return t.to_local() if isinstance(t, DTensor) else t


def _as_dtensor(local, spec):
    """The DTensor of `spec` whose local tensor is `local` (traced)."""
    from torch.distributed.tensor import DTensor
    if spec is None:
        return local
    return DTensor.from_local(local, spec.mesh, spec.placements, run_check=False,
                              shape=spec.shape, stride=spec.stride)


def site_of(fn):
    """(source, code) of the line in `fn` (the user's optimizer builder) that builds
    the optimizer, for the ops of torch's update, which have no user frame."""
    import inspect
    from loom.torch.lower import short_path
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    for k, line in enumerate(lines):
        if "optim" in line and not line.lstrip().startswith(("def ", "#")):
            return f"{short_path(path)}:{first + k}", line.strip()
    return f"{short_path(path)}:{first}", lines[0].strip()


@dataclasses.dataclass
class Body:
    """The forward and backward of a traced step, between the parameters and the
    optimizer's update. The default (body=None): one forward of the model on the
    batch, the loss, its gradients. `run(weights, ps, args, kwargs, extra)` gets the
    values the model computes with (fqn -> tensor, parameters and buffers), the traced
    parameters, the batch and the values of `extra` (Placeholders of what the rank
    receives) and gives (the loss or None, a gradient or None per parameter, the
    tensors it sends, named by `sends`). `drive(weights, ps, batch, extra)`, where the
    launcher's train_step drives the body (a pipeline schedule's step): a context
    manager, entered around the train_step, that yields the tensors sent by name."""
    run: object
    extra: list = dataclasses.field(default_factory=list)
    sends: list = dataclasses.field(default_factory=list)
    drive: object = None


def _parameter_leaf(local, spec, param):
    """A parameter as the step reads it: a leaf tensor (a DTensor of `spec` over the
    traced local tensor) that requires grad as the launcher's parameter does and
    carries the gradient hooks the launcher registered on it (tensor hooks and
    post-accumulate-grad hooks), so that the trace runs them where torch would."""
    from torch.distributed.tensor import DTensor
    # The traced input itself where it can be the leaf (a detach would be an alias
    # whose DTensor statements plan.py reads as the input's).
    t = local.detach() if local.requires_grad else local
    if spec is not None:
        t = DTensor.from_local(t, spec.mesh, spec.placements, run_check=False, shape=spec.shape,
                               stride=spec.stride)
    t.requires_grad_(param.requires_grad)
    for hook in (getattr(param, "_backward_hooks", None) or {}).values():
        t.register_hook(hook)
    for hook in (getattr(param, "_post_accumulate_grad_hooks", None) or {}).values():
        t.register_post_accumulate_grad_hook(hook)
    return t


def trace_step(model, batch, loss_fn, optimizer, *, fake, recorder=None, param_views=None,
               context=None, optimizer_site=None, body=None, train_step=None, moe_groups=1):
    """Traces one training step of `model` on `batch` (a tuple of positional
    arguments or a dict of keyword arguments of its forward): loss_fn(output) is the
    loss, `optimizer` the torch.optim optimizer built over model.parameters().

    DTensor parameters, buffers and states (a parallelized model) enter the trace as
    their local tensors and are made DTensors again inside it, so that the graph is
    the rank's own program on local tensors; `recorder` (a context manager, entered
    inside the trace) may observe it. `param_views` (fqn -> function) gives, for a
    parameter FSDP manages, the value the module computes with (fsdp.py). `context()`
    (a context manager, torchtitan's train context such as loss_parallel) is entered
    around the forward, the loss and the backward."""
    param_views = param_views or {}
    notes = cross_entropy.Notes()
    name, group = _check_optimizer(optimizer)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    by_param = {id(p): fqn for fqn, p in params.items()}
    # A parameter shared by two modules (tied embeddings): its other names.
    aliases = {fqn: by_param[id(p)] for fqn, p in model.named_parameters(remove_duplicate=False)
               if by_param.get(id(p), fqn) != fqn}
    if [id(p) for p in group["params"]] != [id(p) for p in params.values()]:
        missing = [fqn for fqn, p in params.items()
                   if id(p) not in {id(q) for q in group["params"]}]
        if missing or len(group["params"]) != len(params):
            raise CaptureError("the optimizer must be built over model.parameters(), in order "
                               f"(parameters it lacks: {', '.join(missing[:4]) or 'none'})")
    keys = _state_keys(name, group)
    states, step_counts = [], {}
    for fqn, p in params.items():
        st = optimizer.state.get(p, {})
        for k in keys:
            if k in st and st[k] is not None:
                states.append((fqn, k, st[k].detach()))
            elif name == "SGD":
                states.append((fqn, k, None))  # torch's first SGD step starts the buffer
            else:
                states.append((fqn, k, torch.zeros_like(p)))
        step = st.get("step")
        step_counts[fqn] = (float(step) if step is not None else 0.0) + 1.0
    states = [s for s in states if s[2] is not None]

    args, kwargs = (batch, {}) if isinstance(batch, (tuple, list)) else ((), dict(batch))
    with_paths, batch_spec = pytree.tree_flatten_with_path((tuple(args), kwargs))
    flat_batch = [leaf for _, leaf in with_paths]
    data_positions = [i for i, x in enumerate(flat_batch) if isinstance(x, torch.Tensor)]
    data_paths = [_leaf_name(path) for path, _ in with_paths]

    placeholders = []
    for fqn, p in params.items():
        placeholders.append(Placeholder("parameter", fqn, fqn, _local(p), _dtensor_spec(p)))
    for fqn, b in buffers.items():
        placeholders.append(Placeholder("buffer", fqn, fqn, _local(b), _dtensor_spec(b)))
    for fqn, k, t in states:
        placeholders.append(Placeholder("state", f"{fqn}.{k}", fqn, _local(t), _dtensor_spec(t)))
    for i in data_positions:
        x = flat_batch[i]
        placeholders.append(Placeholder("input", data_paths[i], "", _local(x), _dtensor_spec(x)))
    n_data = len(data_positions)
    if body is None:
        body = Body(run=_single_forward(model, loss_fn))
    placeholders += body.extra
    specs = [ph.dtensor for ph in placeholders]

    n_params, n_buffers, n_states = len(params), len(buffers), len(states)
    param_names = list(params)
    buffer_names = list(buffers)

    def step_fn(*flat):
        # The parameters as the launcher left them: leaves of the step that require
        # grad where it says so and carry the hooks it registered on them.
        ps = [_parameter_leaf(x, spec, params[fqn])
              for x, spec, fqn in zip(flat[:n_params], specs, param_names)]
        flat = ps + [_as_dtensor(x, spec) for x, spec in zip(flat[n_params:], specs[n_params:])]
        bs = flat[n_params:n_params + n_buffers]
        ss = flat[n_params + n_buffers:n_params + n_buffers + n_states]
        start = n_params + n_buffers + n_states
        data = list(flat[start:start + n_data])
        extra = list(flat[start + n_data:])
        leaves = list(flat_batch)
        for pos, value in zip(data_positions, data):
            leaves[pos] = value
        call_args, call_kwargs = pytree.tree_unflatten(leaves, batch_spec)
        state = collections.defaultdict(dict)
        counts = []
        for (fqn, k, _), value in zip(states, ss):
            state[fqn][k] = value
        new_state = {}
        for fqn, p in zip(param_names, ps):
            entry = dict(state.get(fqn, {}))
            if name != "SGD":
                entry["step"] = torch.tensor(step_counts[fqn] - 1.0)
                counts.append((entry["step"], step_counts[fqn]))
            new_state[p] = entry
        saved = group["params"], optimizer.state
        group["params"], optimizer.state = ps, collections.defaultdict(dict, new_state)
        loss, sends = None, []
        try:
            with _step_count(counts):
                if train_step is not None:
                    from loom.torch.train_step import run_train_step
                    weights = dict(zip(param_names, ps))
                    weights.update(zip(buffer_names, bs))
                    views = {fqn: param_views[fqn] for fqn in param_views}
                    computed = {fqn: param_views[fqn](w) if fqn in param_views else w
                                for fqn, w in weights.items()}
                    drive = body.drive(computed, ps, call_kwargs, extra) \
                        if body.drive is not None else contextlib.nullcontext({})
                    with (context() if context is not None else contextlib.nullcontext()), \
                            drive as sent:
                        run_train_step(train_step, model, optimizer, weights, views,
                                       tuple(call_args), call_kwargs)
                    sends = [sent[n] for n in body.sends]
                else:
                    with (context() if context is not None else contextlib.nullcontext()):
                        _set_phase("forward")
                        weights = {fqn: param_views[fqn](p) if fqn in param_views else p
                                   for fqn, p in zip(param_names, ps)}
                        weights.update(zip(buffer_names, bs))
                        loss, grads, sends = body.run(weights, ps, tuple(call_args),
                                                      call_kwargs, extra)
                    for p, g in zip(ps, grads):
                        if g is not None or p.grad is not None:
                            p.grad = g
                    _set_phase("optimizer")
                    optimizer.step()
        finally:
            updated = optimizer.state
            group["params"], optimizer.state = saved
        produced["loss"] = loss is not None
        out_states = []
        for fqn, k, _ in states:
            p = ps[param_names.index(fqn)]
            out_states.append(updated[p][k])
        first = (loss,) if loss is not None else ()
        return tuple(_local(x) for x in (*first, *ps, *out_states, *sends))

    produced = {}
    model_tagger = _ModuleTagger(model)
    inputs = []
    for ph in placeholders:
        inputs.append(ph.value.detach())
    traced_fn = step_fn
    if recorder is not None:
        recorder.notes = notes

        def traced_fn(*flat):
            with recorder:
                return step_fn(*flat)
    try:
        from loom.torch.moe import routed_as_loom_ops
        # A checkpointed module's recompute runs its whole forward (no early stop),
        # so that its ops are known as the recompute's (_ModuleTagger).
        from torch.utils.checkpoint import set_checkpoint_early_stop
        with fx_traceback.preserve_node_meta(), _no_autograd_threads(), _quiet_fake_tensors(), \
                _whole_stacks(), _one_metadata_mode(), routed_as_loom_ops(moe_groups), \
                set_checkpoint_early_stop(False):
            module = make_fx(traced_fn, cross_entropy.decompositions(notes),
                             record_stack_traces=True)(*inputs)
    except CaptureError:
        raise
    except Exception as e:  # torch's own tracing errors, with their place
        raise CaptureError(f"tracing the training step failed: {type(e).__name__}: "
                           f"{_first_line(e)}") from e
    finally:
        model_tagger.close()

    outputs = [("loss", "loss")] if produced.get("loss") else []
    outputs += [("parameter", fqn) for fqn in param_names]
    outputs += [("state", f"{fqn}.{k}") for fqn, k, _ in states]
    outputs += [("send", n) for n in body.sends]
    hyper = {k: v for k, v in group.items() if k != "params"}
    return Trace(module=module, placeholders=placeholders, outputs=outputs,
                 optimizer={"class": name, "hyper": hyper, "step": step_counts,
                            "site": optimizer_site},
                 model_class=type(model).__name__, fake=fake, fn=step_fn, inputs=inputs,
                 notes=notes, param_aliases=aliases)


def _single_forward(model, loss_fn):
    """The default Body: the model on the batch, the loss, its backward (into the
    parameters' .grad, running their hooks as torch does)."""
    def run(weights, ps, args, kwargs, extra):
        # The weights stay in the module through the backward: a checkpointed
        # module's forward runs again there, on them.
        with _reparametrize_module(model, weights, tie_weights=True):
            output = model(*args, **kwargs)
            if takes_batch(loss_fn):
                loss = compute_loss(loss_fn, output, kwargs if kwargs or not args else args)
            else:
                loss = compute_loss(loss_fn, output)
            backward_into_grads(loss)
        return loss, [p.grad for p in ps], []
    return run


def backward_into_grads(loss):
    """loss.backward(), traced as the backward phase."""
    _set_phase("backward")
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks
    if loss.grad_fn is not None:
        setup_stacktrace_preservation_hooks([loss.grad_fn])
        loss.backward()
    _set_phase("forward")


def takes_batch(loss_fn):
    """Whether the launcher's loss is loss(output, batch) (the batch it ran on: its
    labels, as a pipeline schedule's loss function takes its target) rather than
    loss(output)."""
    import inspect
    try:
        params = [p for p in inspect.signature(loss_fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2


def compute_loss(loss_fn, *args):
    _set_phase("forward", module="loss")
    loss = loss_fn(*args)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise CaptureError("loss(output) must give a scalar tensor")
    return loss


def backward(outputs, inputs, grad_outputs=None, retain_graph=False):
    """Gradients of `outputs` (a tensor or a list) with respect to `inputs` (None
    where one does not reach it), traced as the backward phase; `retain_graph` keeps
    the graph for another backward (a zero-bubble schedule's weight backward)."""
    _set_phase("backward")
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    setup_stacktrace_preservation_hooks([o.grad_fn for o in outs if o.grad_fn is not None])
    wanted = [i for i, x in enumerate(inputs) if x.requires_grad]  # frozen: no gradient
    got = torch.autograd.grad(outs, [inputs[i] for i in wanted], grad_outputs=grad_outputs,
                              allow_unused=True, retain_graph=retain_graph) if wanted else []
    grads = [None] * len(inputs)
    for i, g in zip(wanted, got):
        grads[i] = g
    _set_phase("forward")
    return grads


@contextlib.contextmanager
def _whole_stacks():
    """make_fx keeps, of each op's Python stack, only frames named `forward`: the
    user's loss function and helpers such as Hugging Face's apply_rotary_pos_emb would
    be lost. The user's own frame inside the traced step is kept instead
    (user_frame_index)."""
    from torch.fx.proxy import TracerBase
    original = TracerBase._filter_traceback_frames

    def keep_step_frames(self, summary):
        from loom.torch.lower import user_frame_index
        frames = list(summary)
        for i, frame in enumerate(frames):
            if frame.name == "step_fn" and frame.filename.endswith(_THIS_FILE):
                frames = frames[i + 1:]
                break
        # Only the frame the capture reports: formatting every frame costs.
        i = user_frame_index([f.filename for f in frames])
        return traceback.StackSummary.from_list([] if i is None else [frames[i]])

    import torch.fx.proxy as proxy
    captured = proxy.CapturedTraceback
    TracerBase._filter_traceback_frames = keep_step_frames
    proxy.CapturedTraceback = _PythonStack
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = original
        proxy.CapturedTraceback = captured


@contextlib.contextmanager
def _one_metadata_mode():
    """make_fx records each real value's metadata as a fake tensor, and DTensor
    derives each op's output metadata on fake tensors; where no fake mode is active
    (a capture with real tensors) each makes a FakeTensorMode of its own, per value,
    and a mode records the Python stack where it is made: a fifth of the trace's
    time. One mode serves them all for the trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    import torch.fx.experimental.proxy_tensor as proxy_tensor
    import torch.distributed.tensor._sharding_prop as sharding_prop
    modules = [m for m in (proxy_tensor, sharding_prop) if hasattr(m, "FakeTensorMode")]
    shared = []

    def one_mode(*args, **kwargs):
        if not shared:
            shared.append(FakeTensorMode(allow_fallback_kernels=True))
        return shared[0]

    saved = [m.FakeTensorMode for m in modules]
    for m in modules:
        m.FakeTensorMode = one_mode
    try:
        yield
    finally:
        for m, original in zip(modules, saved):
            m.FakeTensorMode = original


class _PythonStack:
    """The Python stack where make_fx records a node, its source lines read only for
    the frame kept (keep_step_frames): torch's CapturedTraceback symbolizes every
    frame and reads every line, a fifth of the trace's time."""

    def __init__(self, frame):
        self._frame = frame

    @staticmethod
    def extract():
        return _PythonStack(sys._getframe(1))

    def summary(self):
        frames = []
        f = self._frame
        while f is not None:
            frames.append(traceback.FrameSummary(f.f_code.co_filename, f.f_lineno,
                                                 f.f_code.co_name, lookup_line=False))
            f = f.f_back
        frames.reverse()
        return traceback.StackSummary.from_list(frames)


@contextlib.contextmanager
def logger_at(name, level):
    """The logger `name` ("" for the root) at `level` while entered."""
    import logging
    logger = logging.getLogger(name or None)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def _quiet_fake_tensors():
    """Fake tensors log a traceback for every op whose shapes do not fit before the
    error reaches the caller; the capture reports the error once, with its place."""
    import logging
    return logger_at("torch._subclasses.fake_tensor", logging.CRITICAL)


@contextlib.contextmanager
def _no_autograd_threads():
    # Backward must run on the tracing thread (a worker thread would not see the
    # tracer's state).
    previous = torch.autograd.is_multithreading_enabled()
    torch.autograd.set_multithreading_enabled(False)
    try:
        yield
    finally:
        torch.autograd.set_multithreading_enabled(previous)


def _first_line(e):
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def batch_leaves(batch):
    """The batch's tensors by the names their trace inputs take (trace_step)."""
    args, kwargs = (batch, {}) if isinstance(batch, (tuple, list)) else ((), dict(batch))
    with_paths, _ = pytree.tree_flatten_with_path((tuple(args), kwargs))
    return {_leaf_name(path): leaf for path, leaf in with_paths
            if isinstance(leaf, torch.Tensor)}


def _leaf_name(path):
    """A batch leaf's name from its pytree key path: `input_ids` (a keyword), `arg0`
    (a positional argument), `arg1.0`, `labels.mask`."""
    parts = []
    for i, key in enumerate(path):
        if isinstance(key, pytree.SequenceKey):
            if i == 0:
                continue  # (args, kwargs)
            parts.append(f"arg{key.idx}" if i == 1 and path[0].idx == 0 else str(key.idx))
        elif isinstance(key, pytree.MappingKey):
            parts.append(str(key.key))
        else:
            parts.append(str(key).strip(".[]'"))
    return ".".join(parts) or "input"
