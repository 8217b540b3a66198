"""Ground truth for loom.torch's verdicts: a launcher run for real.

A launcher (the names loom.torch.verify takes: model, parallelize, mesh, inputs, loss,
optimizer, and optionally train_context or train_step) is run twice, for real:

- on every rank of its mesh, one process per rank under gloo on the CPU, exactly as
  a launch would (the launcher's own parallelize on a real DeviceMesh; the rank reads
  its rows of the batch along the data-parallel dims, as loom.torch assumes); each
  rank's gradients, as its optimizer sees them, and its parameters after the step are
  gathered whole (DTensor.full_tensor);
- on one device, the model on the whole batch with the launcher's loss (or its
  train_step on one device): the step the parallel program must compute.

Whether the two agree is what Loom's verdict must say. The processes are forked from
this one (no re-import), and each runs with one thread.
"""

import contextlib
import dataclasses
import math
import multiprocessing
import os
import socket
import tempfile
import traceback

import torch


@dataclasses.dataclass
class Step:
    """What one training step did: parameter name -> gradient (None where the
    optimizer saw none) and parameter after the step, each whole."""
    grads: dict
    params: dict
    losses: list = dataclasses.field(default_factory=list)
    disagreements: list = dataclasses.field(default_factory=list)  # ranks holding other values


def _names(launcher):
    return launcher if isinstance(launcher, dict) else vars(launcher)


def _whole(t):
    from torch.distributed.tensor import DTensor
    if t is None:
        return None
    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().clone()



def _named_parameters(module):
    """(name, parameter) as the state_dict names them (wrappers' names dropped, as
    loom.torch matches them)."""
    from loom.torch.rank_inputs import unwrapped_name
    return [(unwrapped_name(n), p) for n, p in module.named_parameters()]


def _record_grads(optimizer, named, into):
    """Before the optimizer steps: every parameter's gradient, whole."""
    def hook(opt, args, kwargs):
        for fqn, p in named:
            into[fqn] = _whole(p.grad)
    optimizer.register_step_pre_hook(hook)


def _batch_of_rank(names, rank, mesh_names, mesh_sizes):
    from loom.torch.api import batch_for
    return batch_for(names["inputs"], mesh_names, mesh_sizes)(rank, None)


def _call(fn, batch):
    if isinstance(batch, dict):
        return fn(**batch)
    return fn(*batch)


def _train(names, module, optimizer, batch, schedule=None):
    """One step of the launcher's program on this process's module."""
    if "train_step" in names and names["train_step"] is not None:
        names["train_step"](module, optimizer, batch)
        return []
    losses = []
    if schedule is not None:
        from loom.torch.pipeline import TARGET
        kwargs = dict(batch)
        target = kwargs.pop(TARGET, None)
        stages = getattr(schedule, "_stages", None) or [schedule._stage]
        first = any(st.is_first for st in stages)
        last = any(st.is_last for st in stages)
        out = []
        context = names.get("train_context")
        with (context() if context else contextlib.nullcontext()):
            schedule.step(**(kwargs if first else {}), target=target if last else None,
                          losses=out if last else None)
        optimizer.step()
        return [float(x) for x in out]
    context = names.get("train_context")
    with (context() if context else contextlib.nullcontext()):
        output = _call(module, batch)
        from loom.torch.capture import takes_batch
        loss = names["loss"](output, batch) if takes_batch(names["loss"]) else \
            names["loss"](output)
        loss.backward()
    losses.append(float(loss.detach().full_tensor() if hasattr(loss, "full_tensor")
                        else loss.detach()))
    optimizer.step()
    return losses


def _rank_main(names, rank, world, port, out_dir, mesh_names, mesh_sizes):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        mesh = init_device_mesh("cpu", mesh_sizes, mesh_dim_names=mesh_names)
        module = names["model"]()
        result = names["parallelize"](module, mesh)
        from loom.torch.pipeline import StageModules, schedule_of
        schedule = None
        from torch.distributed.pipelining.schedules import _PipelineSchedule
        if isinstance(result, _PipelineSchedule):
            schedule = result
            stages = getattr(result, "_stages", None) or [result._stage]
            module = StageModules([st.submod for st in stages], schedule)
        elif isinstance(result, torch.nn.Module):
            module = result
        named = _named_parameters(module)
        optimizer = names["optimizer"]([p for _, p in named])
        grads = {}
        _record_grads(optimizer, named, grads)
        batch = _batch_of_rank(names, rank, mesh_names, mesh_sizes)
        losses = _train(names, module, optimizer, batch, schedule)
        params = {fqn: _whole(p) for fqn, p in named}
        torch.save({"grads": grads, "params": params, "losses": losses},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_parallel(launcher, timeout=300):
    """The launcher on every rank of its mesh, for real: a Step whose values are
    the lowest rank's that holds each parameter, and `disagreements` naming the
    parameters some rank holds otherwise."""
    from loom.torch.distributed import mesh_shape
    names = _names(launcher)
    mesh_names, mesh_sizes = mesh_shape(names["mesh"])
    return _run(names, math.prod(mesh_sizes), _rank_main, mesh_names, mesh_sizes, timeout)


def _run(names, world, main, mesh_names, mesh_sizes, timeout):
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as out:
        port = _free_port()
        procs = [ctx.Process(target=main,
                             args=(names, r, world, port, out, mesh_names, mesh_sizes))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        errors = []
        for r in range(world):
            path = os.path.join(out, f"rank{r}.err")
            if os.path.exists(path):
                errors.append(f"rank {r}:\n{open(path).read()}")
        if errors or hung:
            raise RuntimeError("the real run failed: " +
                               (f"ranks {hung} did not finish; " if hung else "") +
                               "\n".join(errors))
        results = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world)]
    step = Step(grads={}, params={})
    for r, res in enumerate(results):
        for what, into in (("grads", step.grads), ("params", step.params)):
            for fqn, t in res[what].items():
                if fqn not in into:
                    into[fqn] = t
                elif not _same(into[fqn], t):
                    step.disagreements.append(f"rank {r}: {what} of {fqn}")
        step.losses += res["losses"]
    return step


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-12, atol=0)


def _single_main(names, rank, world, port, out_dir, mesh_names, mesh_sizes):
    """The step on one device: a world of one process (so that a train_step's own
    collectives are the identity), no parallelize, the whole batch."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        module = names["model"]()
        named = _named_parameters(module)
        optimizer = names["optimizer"]([p for _, p in named])
        grads = {}
        _record_grads(optimizer, named, grads)
        losses = _train(names, module, optimizer, names["inputs"]())
        params = {fqn: _whole(p) for fqn, p in named}
        torch.save({"grads": grads, "params": params, "losses": losses},
                   os.path.join(out_dir, "rank0.pt"))
    except BaseException:
        with open(os.path.join(out_dir, "rank0.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def run_single(launcher, timeout=300):
    """The step the parallel program must compute: the model on one device, the whole
    batch, the launcher's loss (or its train_step, in a world of one)."""
    names = _names(launcher)
    return _run(names, 1, _single_main, ("single",), (1,), timeout)


@dataclasses.dataclass
class Comparison:
    grads: float     # largest relative difference of a gradient
    params: float    # of a parameter after the step
    worst: str       # where
    missing: list    # parameters one run has and the other not
    disagreements: list

    def agree(self, tolerance):
        return not self.missing and not self.disagreements and \
            self.grads <= tolerance and self.params <= tolerance


def _relative(a, b):
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    if a.shape != b.shape:
        return math.inf
    scale = float(b.abs().max())
    diff = float((a.to(torch.float64) - b.to(torch.float64)).abs().max())
    return diff / scale if scale > 0 else diff


def compare(parallel, single):
    worst, grads, params = "", 0.0, 0.0
    missing = sorted(set(parallel.params) ^ set(single.params))
    for fqn in single.params:
        if fqn not in parallel.params:
            continue
        g = _relative(parallel.grads.get(fqn), single.grads.get(fqn))
        p = _relative(parallel.params[fqn], single.params[fqn])
        if g > grads:
            grads = g
            worst = worst if p > params else f"gradient of {fqn}"
        if p > params:
            params, worst = p, f"{fqn} after the step"
    return Comparison(grads=grads, params=params, worst=worst, missing=missing,
                      disagreements=list(parallel.disagreements))


def gradient_factor(parallel, single, fqn=None):
    """The factor by which the parallel run's gradients are the single device's
    (least squares over every gradient, or over `fqn`'s alone)."""
    num = den = 0.0
    for name, g in single.grads.items():
        if fqn is not None and name != fqn:
            continue
        p = parallel.grads.get(name)
        if g is None or p is None or p.shape != g.shape:
            continue
        num += float((p.to(torch.float64) * g.to(torch.float64)).sum())
        den += float((g.to(torch.float64) ** 2).sum())
    return num / den if den else math.nan
