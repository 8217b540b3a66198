"""The spec: one training step of a PyTorch model, captured as Loom's logical graph."""

import contextlib
import dataclasses

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import loom
from loom.torch.capture import site_of, trace_step
from loom.torch.dedupe import dedupe
from loom.torch.distributed import fake_process_group, maybe_fake
from loom.torch.errors import CaptureError
from loom.torch.lower import lower_trace


@dataclasses.dataclass
class Spec:
    """A captured training step.

    step: the loom.Step (Loom's logical graph of forward, loss, backward, update);
    text: its text IR; origins: Loom tensor name -> where its op comes from
    (module path, source "file:line", code, phase, the ATen op); inputs: Loom input
    name -> the tensor the capture was given (real at tiny size, fake at real size).
    """
    step: object
    text: str
    origins: dict
    inputs: dict
    outputs: list
    trace: object
    lowering: object
    _without_loss: object = None

    def step_without_loss(self):
        """The step with the updated parameters and optimizer states as its outputs,
        not the loss: what a data-parallel plan holds (each rank its share of the
        loss, which torch never adds up)."""
        if self._without_loss is None:
            g = self.lowering.g
            saved = g.outputs
            g.outputs = [n for n in saved if g.roles.get(n) != "loss"]
            try:
                self._without_loss = loom.parse_step(g.text(), origin="<step without the loss>")
            finally:
                g.outputs = saved
        return self._without_loss

    def feeds(self):
        """Values of every input of the step, as NumPy float64 arrays (real captures)."""
        out = {}
        for name, t in self.inputs.items():
            if t is None:
                continue
            t = t.detach()
            if t.is_complex():  # held as its real view (lowered_values._dims)
                t = torch.view_as_real(t)
            out[name] = t.to(torch.float64).numpy()
        return out


def _build(builder, fake):
    if not fake:
        return builder()
    return builder()


def capture_step(model, inputs, loss, optimizer, *, fake=False, name=None, model_instance=None,
                 train_step=None, moe_groups=1):
    """Captures one training step of the model `model()` builds on the batch
    `inputs()`: loss(output) is the loss, optimizer(params) builds the torch.optim
    optimizer. With fake=True nothing is allocated (real sizes): the model and every
    value it computes are FakeTensors; the batch is real. With `train_step`,
    the user's own step (train_step.py) on the whole batch, in a world of one process.
    `moe_groups`: the routing groups of its mixture-of-experts blocks (moe.py: the
    data-parallel ranks')."""
    with _one_process_world():
        # The batch is data, real even at real size, as each rank's is
        # (distributed.trace_rank): what the step reads off it (a token count) is a
        # constant on one device as on the ranks.
        batch = inputs()
    with _one_process_world(), maybe_fake(fake):
        module = model_instance if model_instance is not None else model()
        if not isinstance(module, torch.nn.Module):
            raise CaptureError(f"model() gave a {type(module).__name__}, not a torch.nn.Module")
        opt = optimizer(list(module.parameters()))
        trace = trace_step(module, batch, loss, opt, fake=fake, optimizer_site=site_of(optimizer),
                           train_step=train_step, moe_groups=moe_groups)
    merged = dedupe(trace.module)
    for names in (trace.notes.log_softmax, trace.notes.fused, trace.notes.counts):
        names.update({merged[n] for n in names if n in merged})
    lowering = lower_trace(trace, name or type(module).__name__)
    text = lowering.g.text()
    step = loom.parse_step(text, origin=f"<{name or type(module).__name__} step>")
    origins = dict(lowering.folded_origin)
    for op in lowering.g.ops:
        for n in op["outputs"]:
            origins[n] = op["origin"]
    values = {}
    for n, ph in lowering.inputs.items():
        values[n] = ph.value
    values.update(lowering.constants)
    return Spec(step=step, text=text, origins=origins, inputs=values,
                outputs=list(lowering.g.outputs), trace=trace, lowering=lowering)


@contextlib.contextmanager
def _one_process_world():
    """The step on one device runs in a world of one process (a fake process group
    of one rank), as the same launcher run alone would: the program's own
    collectives are the identity there, `dist.get_world_size()` is 1."""
    import torch.distributed as dist
    if dist.is_initialized():
        yield
        return
    with fake_process_group(0, 1):
        yield


_LOWER = (torch.float32, torch.float16, torch.bfloat16)


class KeepFloat64(TorchDispatchMode):
    """Runs a program in float64 throughout: every float tensor an op reads is taken
    in float64, and an op asked for another float dtype (a cast, a float32 buffer
    or constant) makes float64 instead. Loom's float64 evaluation computes every
    value in float64 whatever its dtype; this makes torch's step comparable with it
    (a model's own `.float()` or a float32 buffer would otherwise round there)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        def widen(x):
            if isinstance(x, torch.Tensor) and x.dtype in _LOWER:
                return x.to(torch.float64)
            return x

        args = torch.utils._pytree.tree_map(widen, args)
        kwargs = {k: (torch.float64 if k == "dtype" and v in _LOWER else widen(v))
                  for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)
