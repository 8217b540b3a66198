"""loom.torch.verify: one call for a launcher (docs/torch.md).

    report = loom.torch.verify(model=build, parallelize=parallelize, mesh={"tp": 2},
                               inputs=batch, loss=loss, optimizer=optimizer)

captures the model's single-device training step (the spec), then each rank's
program as torch.distributed runs it after the launcher's own `parallelize(module,
mesh)` (the plan), and proves the plan equivalent to the spec with Loom's verifier.
"""

import collections.abc
import dataclasses
import math
import os
import re
import time

import torch

import loom
from loom.torch import claims as C
from loom.torch.distributed import PIPELINE_DIM, coordinate_of, mesh_shape, trace_rank
from loom.torch.errors import CaptureError, RefutedWhileLowering
from loom.torch.launcher import Guard, check_timeout, timeouts_paused
from loom.torch.plan import build_plan
from loom.torch.distributed import maybe_fake
from loom.torch.spec import capture_step
from loom.torch.symmetry import (RankReads, representatives, stand_in, uneven_layout,
                                 unsliced_group)

# Mesh dims whose ranks split the batch (data parallelism); the others see all of it.
DATA_PARALLEL_DIMS = ("dp", "dp_replicate", "dp_shard", "fsdp", "hsdp", "ddp", "data")


@dataclasses.dataclass
class Failure:
    """One place where the ranks' programs do not compute the model's step."""
    cls: str            # "missing_reduction", "scaled", "wrong_shard", ...
    tensor: str         # the logical tensor (Loom's name for it)
    module: str         # the module path of the op: "model.layers.3.mlp.down_proj"
    source: str         # "file.py:123" of the user's code that ran the op
    code: str           # that line's code
    item: str           # Loom's task or collective
    devices: list       # ranks
    box: str
    part: str
    message: str
    counterexample: str
    aten: str           # the ATen op
    phase: str
    found_in: str = ""  # module (source) of the task where Loom found it, if elsewhere
    loom_index: int = -1  # its first entry in the verifier's report (-1: the capture's)
    # A failure of class scaled: where the factors its values hold were applied
    # ("x1/2: the program's own scaling by 1/2 at loss (launcher.py:12)").
    applied: list = dataclasses.field(default_factory=list)

    def __str__(self):
        where = ", ".join(p for p in (self.module, self.source) if p)
        found = ""
        if self.found_in and not self.found_in.startswith(self.module or "\0"):
            found = f"; found in {self.found_in}"
        return (f"{self.cls} at {where or '?'} on ranks {','.join(map(str, self.devices))} "
                f"(tensor '{self.tensor}'{found}): {self.message}")


@dataclasses.dataclass
class Report:
    verdict: str        # "proved equivalent", "not equivalent", "undecided"
    exit_code: int      # 0, 1, 2
    failures: list      # Failure
    undecided: list     # (item, reason)
    loom_report: object  # the loom.Report
    spec: object
    step: object        # the loom.Step proved (spec.step, or without the loss)
    plan: object
    plan_json: str
    times: dict         # seconds: capture (spec), ranks, plan, verify
    capture: str = ""   # how the ranks' programs were captured (symmetry.py)

    @property
    def ok(self):
        return self.exit_code == 0

    def summary(self):
        lines = [f"verdict:   {self.verdict}",
                 f"spec:      {self.spec.step}",
                 f"plan:      {self.plan}",
                 "ranks:     " + self.capture,
                 "time:      " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items())]
        lines.append(f"failures:  {len(self.failures)}")
        for f in self.failures:
            lines.append(f"  {f}")
            if f.counterexample:
                lines.append(f"    {f.counterexample}")
            for line in f.applied:
                lines.append(f"    factor {line}")
        for item, reason in self.undecided:
            lines.append(f"  undecided {item}: {reason}")
        return "\n".join(lines)


def data_claim_for(mesh_names, mesh_sizes):
    """Claims of a rank's batch tensors: dim 0 split over the data-parallel mesh dims
    (in mesh order), whole over the others."""
    data_dims = [i for i, n in enumerate(mesh_names) if n in DATA_PARALLEL_DIMS]

    def claim(ph, tensor, full_dims, local_dims, rank):
        box = [[0, d] for d in full_dims]
        if data_dims and full_dims:
            parts = math.prod(mesh_sizes[i] for i in data_dims)
            index = 0
            for i in data_dims:
                index = index * mesh_sizes[i] + rank.coordinate[i]
            if full_dims[0] % parts:
                raise CaptureError(f"batch input '{ph.name}' has {full_dims[0]} rows, which the "
                                   f"{parts} data-parallel ranks cannot share equally")
            rows = full_dims[0] // parts
            box[0] = [index * rows, (index + 1) * rows]
        return C.Claim(tensor=tensor, box=tuple(tuple(b) for b in box), part=C.FULL)
    return claim


def check_mesh(mesh):
    """(names, sizes) of a mesh given as {"dp": 2, "tp": 2}, outermost dim first;
    CaptureError for anything else: not a dict, no dims, a name that is not a
    non-empty string without spaces, ',' or '=', a size that is not an integer >= 1."""
    if not isinstance(mesh, dict) or not mesh:
        raise CaptureError(f"mesh must be a dict of dim name -> size, such as "
                           f"{{'dp': 2, 'tp': 2}}, not {mesh!r}")
    for name, size in mesh.items():
        if not isinstance(name, str) or not name or any(c.isspace() or c in ",="
                                                        for c in name):
            raise CaptureError(f"mesh dim name {name!r} is not a name such as 'dp' (a "
                               "non-empty string without spaces, ',' or '=')")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise CaptureError(f"mesh dim {name!r}: size {size!r} is not an integer >= 1")
    return mesh_shape(mesh)


def check_cache_dir(path):
    """Makes the proof cache directory `path` if it is missing; CaptureError where it
    cannot be one (a file, not creatable, not writable). "" is no cache."""
    if not isinstance(path, str):
        raise CaptureError(f"the proof cache must be a directory's path, not {path!r}")
    if not path:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise CaptureError(f"proof cache {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise CaptureError(f"proof cache {path}: cannot create it: {e.strerror or e}") from e
    if not os.access(path, os.W_OK | os.X_OK):
        raise CaptureError(f"proof cache {path}: not writable")


def _check_arguments(functions, fake, every_rank, timeout_ms):
    for name, fn in functions.items():
        if fn is not None and not callable(fn):
            raise CaptureError(f"{name} must be a function, not a {type(fn).__name__}")
    for name, value in (("fake", fake), ("every_rank", every_rank)):
        if not isinstance(value, bool):
            raise CaptureError(f"{name} must be True or False, not {value!r}")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise CaptureError(f"timeout_ms must be an integer >= 1, not {timeout_ms!r}")


def check_batch(inputs, mesh_names, mesh_sizes, fake):
    """Refuses, before any tracing, a batch the mesh cannot split: `inputs()` must
    give a tuple of positional arguments or a dict of keyword arguments, and the
    data-parallel dims' ranks must share the rows (dim 0) of its every tensor
    equally, at least one each."""
    with maybe_fake(fake):
        batch = inputs()
    if not isinstance(batch, (tuple, list, collections.abc.Mapping)):
        raise CaptureError(f"inputs() gave a {type(batch).__name__}; it must give one batch: "
                           "a tuple of positional arguments or a dict of keyword arguments "
                           "of the model's forward")
    data_dims = [i for i, n in enumerate(mesh_names) if n in DATA_PARALLEL_DIMS]
    if not data_dims:
        return
    from loom.torch.capture import batch_leaves
    parts = math.prod(mesh_sizes[i] for i in data_dims)
    dims = " x ".join(f"{mesh_names[i]}={mesh_sizes[i]}" for i in data_dims)
    for name, x in batch_leaves(batch).items():
        if x.dim() == 0:
            continue
        rows = x.shape[0]
        if rows < parts or rows % parts:
            raise CaptureError(f"the batch's '{name}' has {rows} rows, which the {parts} "
                               f"data-parallel ranks of the mesh ({dims}) cannot share "
                               f"equally: give a batch of a multiple of {parts} rows, or "
                               "fewer data-parallel ranks")


def batch_for(inputs, mesh_names, mesh_sizes):
    """The batch rank r reads: the rows of `inputs()` its data-parallel coordinate
    gives it (every tensor's dim 0), the whole batch without data parallelism."""
    data_dims = [i for i, n in enumerate(mesh_names) if n in DATA_PARALLEL_DIMS]

    def batch(rank, device_mesh):
        whole = inputs()
        if not data_dims:
            return whole
        from loom.torch.distributed import coordinate_of
        coord = coordinate_of(rank, mesh_sizes)
        parts = math.prod(mesh_sizes[i] for i in data_dims)
        index = 0
        for i in data_dims:
            index = index * mesh_sizes[i] + coord[i]

        def rows(x):
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                n = x.shape[0] // parts
                return x[index * n:(index + 1) * n]
            return x
        return torch.utils._pytree.tree_map(rows, whole)
    return batch


def _origin_of(item, doc, spec):
    m = re.match(r"task (\d+)", item or "")
    if m and int(m.group(1)) < len(doc.origin_of_task):
        return doc.origin_of_task[int(m.group(1))] or {}
    return {}


def _place(origin):
    return " ".join(p for p in (origin.get("module", ""),
                                f"({origin['source']})" if origin.get("source") else "") if p)


class _Producers:
    """Which task made each plan value."""

    def __init__(self, doc):
        self.doc = doc
        self.of = {}
        for i, t in enumerate(doc.tasks):
            for o in t["outputs"]:
                self.of[o] = i

    def _shares(self, i):
        return [v for v in self.doc.tasks[i]["inputs"]
                if self.doc.values[v].claim.part not in (C.FULL, C.EMPTY)]

    def partial_made(self, values):
        """The task that made the partial sum among `values`, followed back through
        the tasks that only pass a share on (a residual add of a partial output):
        where the reduction went missing. None if a collective or an input made it."""
        seen = set()
        current = values
        while current:
            made = self.of.get(current[0])
            if made is None or made in seen:
                return None
            seen.add(made)
            earlier = self._shares(made)
            if not earlier:
                return made
            current = earlier
        return None

    def scalings_for(self, f):
        """For a failure of class scaled: where the factors of the values its item
        reads were applied (doc.scalings), in data-flow order."""
        if f.cls != "scaled":
            return []
        if not hasattr(self, "_made_by"):
            self._made_by = dict(self.of)
            self._made_by = {v: ("task", i) for v, i in self.of.items()}
            for c in self.doc.collectives:
                for o in c["outputs"]:
                    self._made_by[o] = ("collective", c["id"])
            self._scaling_of = {}
            for sc in self.doc.scalings:
                self._scaling_of.setdefault(sc["value"], []).append(sc)
        start = []
        m = re.match(r"(task|collective) (\d+)", f.item or "")
        if m and m.group(1) == "task" and int(m.group(2)) < len(self.doc.tasks):
            start = list(self.doc.tasks[int(m.group(2))]["inputs"])
        elif m and int(m.group(2)) < len(self.doc.collectives):
            start = list(self.doc.collectives[int(m.group(2))]["inputs"])
        value = re.search(r"value (\d+)", f.message or "")
        if value:
            start.append(int(value.group(1)))
        seen, found, stack = set(), [], list(start)
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            found += self._scaling_of.get(v, [])
            made = self._made_by.get(v)
            if made is None:
                continue
            what, i = made
            item = self.doc.tasks[i] if what == "task" else self.doc.collectives[i]
            stack.extend(item["inputs"])
        found.sort(key=lambda sc: sc["value"])
        return found

    def made_for(self, f):
        """For a missing reduction: the task where it went missing (a failure at a
        task reads a partial sum; at a plan output, holds one)."""
        if f.cls != "missing_reduction":
            return None
        task = re.match(r"task (\d+)", f.item or "")
        if task and int(task.group(1)) < len(self.doc.tasks):
            return self.partial_made(self._shares(int(task.group(1))))
        value = re.search(r"value (\d+) holds a partial", f.message or "")
        if value and int(value.group(1)) < len(self.doc.values):
            return self.partial_made([int(value.group(1))])
        return None


def _failures(report, doc, spec):
    """Loom's failures in the user's terms: the module and source line of the op where
    the values first diverge (for a missing reduction, the op that made the partial
    sum, not the one that found it incomplete; otherwise the spec op Loom names as
    first_op), and the place of the task that found it; in the spec's order of those
    ops (the earliest divergence first), the same failure on several ranks once."""
    producers = _Producers(doc)
    order = doc.S.tensor_id
    out = []
    for index, f in enumerate(report.failures):
        found = _origin_of(f.item, doc, spec) or spec.origins.get(f.tensor, {})
        origin = {}
        rank_key = order.get(f.tensor, len(order))
        made = producers.made_for(f)
        if made is not None:
            origin = doc.origin_of_task[made] or {}
            spec_op = doc.S.g.ops[doc.tasks[made]["op"]] if doc.tasks[made]["op"] >= 0 else None
            if spec_op is not None and spec_op["outputs"]:
                rank_key = order.get(spec_op["outputs"][0], rank_key)
        applied = producers.scalings_for(f)
        if applied:
            # The place of the factor: the program's own scaling first (a loss
            # divided by the world size), then a count of the rank's batch, then a
            # collective (an average, a sum of copies).
            def rank(sc):
                kind = 0 if "scaling" in sc["what"] else 1 if "token count" in sc["what"] \
                    else 2
                return (kind, sc["value"])
            origin = dict(min(applied, key=rank)["origin"] or {})
        if not origin and f.item.startswith("task "):
            origin = found  # the task computes something else: it is the place
        if not origin:
            first = re.search(r"-> '([^']+)'", f.first_op or "")
            origin = spec.origins.get(first.group(1), {}) if first else {}
        if not origin.get("module") and not origin.get("source"):
            origin = found
        failure = Failure(cls=f.cls, tensor=f.tensor, module=origin.get("module", ""),
                          source=origin.get("source", ""), code=origin.get("code", ""),
                          item=f.item, devices=list(f.devices), box=f.box, part=f.part,
                          message=f.message, counterexample=f.counterexample,
                          aten=origin.get("target", ""), phase=origin.get("phase", ""),
                          found_in=_place(found), loom_index=index,
                          applied=_applied_text(applied))
        failure._order = rank_key
        # The same failure on several ranks (each rank's piece): one, with its ranks.
        key = (f.cls, f.tensor, failure.module, failure.source,
               re.sub(r"value \d+", "value", f.message))
        same = next((g for g in out if (g.cls, g.tensor, g.module, g.source,
                                        re.sub(r"value \d+", "value", g.message)) == key), None)
        if same is not None:
            same.devices = sorted(set(same.devices) | set(failure.devices))
        else:
            out.append(failure)
    out.sort(key=lambda g: g._order)
    return out


def _applied_text(applied):
    """Where the factors a scaled failure's values hold were applied, one line each
    (the same factor at one place on several ranks once)."""
    lines = []
    for sc in applied:
        place = _place(sc["origin"] or {})
        line = f"x{sc['factor']}: {sc['what']}" + (f" at {place}" if place else "")
        if line not in lines:
            lines.append(line)
    return lines


def _plan_failures(doc):
    out = []
    for f in doc.failures:
        origin = f.get("origin") or {}
        out.append(Failure(cls=f["cls"], tensor=f["tensor"], module=origin.get("module", ""),
                           source=origin.get("source", ""), code=origin.get("code", ""),
                           item="capture", devices=f["devices"], box="", part="",
                           message=f["message"], counterexample="",
                           aten=origin.get("target", ""), phase=origin.get("phase", "")))
    return out


def _traced_once_per_pipeline_rank(traced, sizes, pp, done, batch=None):
    """Every rank's RankTrace, from one trace per pipeline rank (symmetry.py), and
    how the ranks were captured; (None, why not) when a representative's program
    depends on its rank in a way Loom does not model. `done`: rank -> the traces
    made (for the ranks traced after all)."""
    reps = {}
    for r in representatives(sizes, pp):
        with RankReads(sizes, () if pp is None else (pp,)) as reads:
            rep = done[r] = traced(r)
        if reads.outside:
            return None, ("every rank traced: rank " f"{r}'s program reads its rank at "
                          + ", ".join(reads.outside[:3]))
        uneven = uneven_layout(rep) or unsliced_group(rep, sizes)
        if uneven:
            return None, f"every rank traced: {uneven}"
        reps[rep.coordinate[pp] if pp is not None else 0] = rep
    from loom.torch.distributed import batch_data
    ranks = []
    for r in range(math.prod(sizes)):
        rep = reps[coordinate_of(r, sizes)[pp] if pp is not None else 0]
        data = batch_data(batch(r, None), rep.pipeline) if batch is not None and \
            r != rep.rank else None
        ranks.append(stand_in(rep, r, sizes, data))
    return ranks, f"one rank traced per pipeline rank ({len(reps)} of {len(ranks)})"


def verify(*, model, parallelize, mesh, inputs, optimizer, loss=None, train_step=None,
           train_context=None, fake=False, name=None, timeout_ms=10000, threads=0,
           cache_dir="", every_rank=False, capture_timeout=None, progress=None):
    """Proves that the programs torch runs on the ranks of `mesh` after
    `parallelize(module, device_mesh)` compute the training step of `model()`.

    model: builds the torch.nn.Module (called once for the spec and once per rank).
    parallelize: the launcher's own function; applies DTensor parallel styles, FSDP2,
        ... to the module (returning it, or a replacement, or None).
    mesh: {"dp": 2, "tp": 2}, outermost dim first; dims named dp (dp_shard, fsdp, ...)
        split the batch.
    inputs: returns one batch: a tuple of positional arguments or a dict of keyword
        arguments of the model's forward (the global batch; a data-parallel rank reads
        its rows).
    loss: loss(output) -> the scalar loss. optimizer: optimizer(params) -> a
        torch.optim.AdamW, Adam or SGD.
    train_step: the user's own step instead of loss: train_step(model, optimizer,
        batch) runs the forward, the loss, backward(), whatever the trainer does
        before the update (gradient synchronisation by hand, clipping, a micro-batch
        loop) and optimizer.step(); traced whole on one device (a world of one
        process: its collectives are the identity) and on every rank. Where
        parallelize returns a pipeline schedule, a rank's model is its stage modules
        as one module and model.schedule that schedule, whose step(**inputs,
        target=..., losses=...) the train_step calls on the batch's own tensors.
    train_context: train_context() gives a context manager each rank enters around
        its forward, loss and backward, as torchtitan's train context does (e.g.
        torch.distributed.tensor.parallel.loss_parallel).
    fake: build everything from FakeTensors (real sizes, nothing allocated).
    every_rank: trace every rank's program. By default one rank per pipeline rank is
        traced and stands for the others, unless its program reads its rank outside
        torch.distributed's own code or its shards are uneven (docs/torch.md).
    capture_timeout: seconds the capture (the launcher's code, torch's tracing, the
        lowering) may take before it is stopped (None: no limit); from the main
        thread only (a SIGALRM timer).
    progress: progress(words) is called as each stage starts ("checking the batch",
        "tracing rank 3", "tracing the single-device step", "lowering the plan",
        "proving the plan"); loom.torch.TerminalStatus shows them on a terminal.

    Returns a Report (.verdict, .exit_code 0/1/2, .failures with .module and .source).
    CaptureError (a ValueError) for a program or model Loom cannot capture or
    arguments it cannot use (checked before any tracing, as is a batch the mesh's
    data-parallel ranks cannot share); LauncherError (a CaptureError) where the
    launcher's own code failed: raised, called sys.exit, or ran past
    capture_timeout, naming its function and line.
    """
    if (loss is None) == (train_step is None):
        raise CaptureError("give the loss (loss(output) -> scalar) or the whole step "
                           "(train_step(model, optimizer, batch)), one of the two")
    functions = {"model": model, "parallelize": parallelize, "inputs": inputs,
                 "optimizer": optimizer, "loss": loss, "train_step": train_step,
                 "train_context": train_context}
    _check_arguments(functions, fake, every_rank, timeout_ms)
    capture_timeout = check_timeout(capture_timeout, "capture_timeout")
    names, sizes = check_mesh(mesh)
    check_cache_dir(cache_dir)
    guard = Guard({k: fn for k, fn in functions.items() if fn is not None},
                  timeout=capture_timeout)
    guard.progress = progress
    with guard:
        guard.stage = "checking the batch"
        check_batch(inputs, names, sizes, fake)
        captured = _capture(model, parallelize, mesh, inputs, optimizer, loss, train_step,
                            train_context, fake, name, every_rank, names, sizes, guard)
    spec, doc, text, plan, step, times, capture = captured
    if plan is None:  # refuted while lowering (RefutedWhileLowering): nothing to prove
        return Report(verdict="not equivalent", exit_code=1, failures=_plan_failures(doc),
                      undecided=[], loom_report=None, spec=spec, step=None, plan=None,
                      plan_json="", times=times, capture=capture)
    t0 = time.perf_counter()
    if progress is not None:
        progress("proving the plan")
    try:
        with timeouts_paused():  # a caller's (the command's) capture timeout
            report = loom.verify(step, plan, timeout_ms=timeout_ms, threads=threads,
                                 cache_dir=cache_dir)
    except ValueError:
        if not doc.failures:
            raise
        report = None  # a plan the capture refuted already, whose pieces do not fit
    if report is None:
        return Report(verdict="not equivalent", exit_code=1, failures=_plan_failures(doc),
                      undecided=[], loom_report=None, spec=spec, step=step, plan=plan,
                      plan_json=text, times=times, capture=capture)
    times["verify"] = time.perf_counter() - t0
    failures = _plan_failures(doc) + _failures(report, doc, spec)
    verdict, exit_code = report.verdict, report.exit_code
    if doc.failures:
        verdict, exit_code = "not equivalent", 1
    return Report(verdict=verdict, exit_code=exit_code, failures=failures,
                  undecided=[(u.item, u.reason) for u in report.undecided],
                  loom_report=report, spec=spec, step=step, plan=plan, plan_json=text,
                  times=times, capture=capture)


def _capture(model, parallelize, mesh, inputs, optimizer, loss, train_step, train_context,
             fake, name, every_rank, names, sizes, guard):
    """The spec, the ranks' traces and the plan of verify; `guard.stage` says which
    is under way."""
    times = {}
    t0 = time.perf_counter()
    batch = batch_for(inputs, names, sizes)
    # Pipeline stages in order: a stage learns from its sender what it receives.
    pp = names.index(PIPELINE_DIM) if PIPELINE_DIM in names else None
    world = range(math.prod(sizes))
    order = sorted(world, key=lambda r: coordinate_of(r, sizes)[pp]) if pp is not None else world
    boundary = {}

    def traced(r):
        guard.stage = f"tracing rank {r}"
        return trace_rank(r, mesh, model, parallelize, batch, loss, optimizer, fake=fake,
                          context=train_context, boundary=boundary, train_step=train_step)
    ranks, capture, done = None, "every rank traced", {}
    if not every_rank and len(world) > 1:
        ranks, capture = _traced_once_per_pipeline_rank(traced, sizes, pp, done, batch)
    if ranks is None:
        ranks = sorted((done[r] if r in done else traced(r) for r in order),
                       key=lambda t: t.rank)
    times["ranks"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pipe = ranks[0].pipeline
    # The step routes its mixture-of-experts tokens in the groups the data-parallel
    # ranks (and their micro-batches) route theirs in (moe.py).
    moe_groups = math.prod(sizes[i] for i, n in enumerate(names) if n in DATA_PARALLEL_DIMS)
    if pipe is not None:
        moe_groups *= pipe.total_microbatches
    guard.stage = "tracing the single-device step"
    spec = capture_step(model, inputs, loss, optimizer, fake=fake, name=name,
                        train_step=train_step,
                        moe_groups=moe_groups)
    times = {"spec": time.perf_counter() - t0, **times}
    t0 = time.perf_counter()
    guard.stage = "lowering the plan"
    data_dims = [i for i, n in enumerate(names) if n in DATA_PARALLEL_DIMS]
    try:
        doc, lowerings = build_plan(spec, ranks, names, sizes, data_claim_for(names, sizes),
                                   name or spec.trace.model_class, data_dims=data_dims)
    except RefutedWhileLowering as e:
        times["plan"] = time.perf_counter() - t0
        return spec, e.doc, "", None, None, times, capture
    if doc.lowered is not None:
        capture += f"; {len(doc.lowered)} lowered, the others' plans written from theirs"
    text = doc.json()
    try:
        plan = loom.parse_plan(text, origin="<captured plan>")
    except ValueError:
        if not doc.failures:
            raise
        # Refuted while capturing (a value claiming a piece of no tensor of the
        # model's): the failures say why; there is no plan to prove.
        times["plan"] = time.perf_counter() - t0
        return spec, doc, "", None, None, times, capture
    step = spec.step if doc.loss_output else spec.step_without_loss()
    times["plan"] = time.perf_counter() - t0
    return spec, doc, text, plan, step, times, capture
