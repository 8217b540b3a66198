"""The per-rank programs torch.distributed will run, captured one rank at a time
under a fake process group (nothing communicates; collectives are recorded).

For rank r of the mesh, in this process: the fake process group of rank r, the
DeviceMesh, the model the user's builder makes, the user's own `parallelize(module,
mesh)` applied to it, the optimizer over its (now distributed) parameters, and the
trace of one training step on rank r's batch, with the Recorder noting what DTensor
says every local tensor holds and where it redistributes.
"""

import contextlib
import dataclasses
import math
import sys

import torch
import torch.distributed as dist

from loom.torch.capture import site_of, trace_step
from loom.torch.claims import coordinate_of
from loom.torch.errors import CaptureError
from loom.torch.rank_trace import Recorder


@dataclasses.dataclass
class RankTrace:
    rank: int
    coordinate: tuple     # the rank's coordinate in the mesh, outermost dim first
    trace: object         # capture.Trace of its step
    recorder: Recorder
    groups: dict          # process group name -> ranks of the group, in group order
    managed: dict = None  # fqn -> fsdp.ManagedParam (FSDP2 / replicate)
    pipeline: object = None  # pipeline.Pipeline of a pipelined rank
    # A rank standing in with another's trace: its own batch, placeholder name ->
    # tensor (None: the trace's own).
    data: dict = None


def batch_data(batch, pipe=None):
    """The batch a rank's trace reads, placeholder name -> tensor, as trace_step
    names its inputs (a pipelined rank's split into the schedule's micro-batches)."""
    from loom.torch import pipeline
    from loom.torch.capture import batch_leaves
    if pipe is not None and pipe.driven:
        return {**batch_leaves(batch),
                **batch_leaves(pipeline.microbatches(batch, pipe.total_microbatches))}
    if pipe is not None:
        batch = pipeline.microbatches(batch, pipe.total_microbatches)
    return batch_leaves(batch)


def _clear_dtensor_caches():
    """DTensor caches sharding decisions and redistribution plans by spec, and specs
    compare meshes by shape, not by rank: a decision cached while tracing one rank
    would be reused, with that rank's mesh and process groups, for the next."""
    from torch.distributed.tensor._collective_utils import MeshTopoInfo
    from torch.distributed.tensor._redistribute import _gen_transform_infos
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    _clear_sharding_prop_cache()
    _gen_transform_infos.cache_clear()
    MeshTopoInfo.build_from_mesh.cache_clear()
    from torch.distributed.tensor import DTensor
    prop = DTensor._op_dispatcher.sharding_propagator
    if hasattr(prop, "_propagate_tensor_meta_cached"):
        prop._propagate_tensor_meta_cached.cache_clear()


@contextlib.contextmanager
def maybe_fake(fake):
    """Fake tensors throughout (real sizes, nothing allocated) where `fake`."""
    if not fake:
        yield None
        return
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


@contextlib.contextmanager
def fake_process_group(rank, world_size):
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        raise CaptureError("a process group is already initialized in this process; "
                           "loom.torch captures each rank under a fake one of its own")
    _clear_dtensor_caches()
    # init_process_group prefixes every later traceback with "[rank<r>]:" (its own
    # excepthook); the capture is one process, so the hook goes with the group.
    excepthook = sys.excepthook
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = excepthook
        _clear_dtensor_caches()


PIPELINE_DIM = "pp"  # the mesh dim whose ranks hold the pipeline's stages


def mesh_shape(mesh):
    """(names, sizes) of a mesh given as {"dp": 2, "tp": 2} (outermost first)."""
    if not isinstance(mesh, dict) or not mesh:
        raise CaptureError("mesh must be a dict of dim name -> size, e.g. {'dp': 2, 'tp': 2}")
    names, sizes = [], []
    for name, size in mesh.items():
        if not isinstance(name, str) or not isinstance(size, int) or size < 1:
            raise CaptureError(f"mesh dim {name!r}: size {size!r} is not a positive integer")
        names.append(name)
        sizes.append(size)
    return tuple(names), tuple(sizes)


def _groups():
    """Every process group torch created: its name and ranks (in group rank order)."""
    from torch.distributed.distributed_c10d import _world
    out = {}
    for pg in list(_world.pg_map):
        try:
            name = pg.group_name
            ranks = dist.get_process_group_ranks(pg)
        except Exception:  # groups this rank is not part of
            continue
        out[name] = list(ranks)
    return out


def _keep_mesh_tables(trace, recorder, sizes):
    """Every mesh the rank's DTensors live on keeps its table of global ranks
    (DeviceMesh computes it from the process group, which is gone after the trace),
    and the launch mesh's sizes (claims.table_for)."""
    specs = [ph.dtensor for ph in trace.placeholders if ph.dtensor is not None]
    specs += list(recorder.specs.values())
    for r in recorder.redistributions:
        specs += [r.source, r.target]
    meshes = [spec.mesh for spec in specs] + [w.mesh for w in recorder.mask_windows.values()]
    for mesh in meshes:
        if getattr(mesh, "_loom_ranks", None) is None:
            mesh._loom_ranks = mesh.mesh.clone()
            mesh._loom_launch = tuple(sizes)


def _stage_inputs(pipe, batch, boundary, chain, views):
    """Runs the rank's stages once, in order, on the first micro-batch (no gradients)
    to learn what each sends: boundary[(chain, s + 1)] = (shape, dtype) of stage s's
    output, which stage s + 1 receives (and whose gradient stage s receives back).
    A stage whose input another rank sends must find it there (ranks are traced in
    pipeline order), or give it as its PipelineStage's input_args."""
    from loom.torch import pipeline
    mb = pipeline._microbatch(batch, 0)
    mb.pop(pipeline.TARGET, None)
    for st in sorted(pipe.stages, key=lambda st: st.stage_index):
        s = st.stage_index
        # The weights the stage computes with (FSDP's gathered parameters).
        weights = {n: views[n](p) if n in views else p for n, p in st.submod.named_parameters()}
        with torch.no_grad():
            if st.is_first:
                out = torch.func.functional_call(st.submod, weights, (), mb)
            else:
                meta = boundary.get((chain, s)) or _user_input_meta(st)
                if meta is None:
                    # It receives from a stage of a rank traced later (an interleaved or
                    # V schedule): the hidden states the first stage gives, checked
                    # once that rank is traced (check_stage_inputs).
                    meta = boundary.get((chain, 1))
                    if meta is None:
                        raise CaptureError(f"stage {s} receives from a stage traced later; give "
                                           "its PipelineStage input_args (the shape it "
                                           "receives)")
                    boundary.setdefault("assumed", {})[(chain, s)] = meta
                boundary[(chain, s)] = meta
                out = torch.func.functional_call(
                    st.submod, weights, (torch.zeros(meta[0], dtype=meta[1]),))
        if not isinstance(out, torch.Tensor):
            raise CaptureError(f"stage {s} gives a {type(out).__name__}; a pipeline stage's "
                               "output must be one tensor")
        from torch.distributed.tensor import DTensor
        if isinstance(out, DTensor):
            out = out.to_local()
        meta = (tuple(out.shape), out.dtype)
        assumed = boundary.get("assumed", {}).get((chain, s + 1))
        if assumed is not None and assumed != meta:
            raise CaptureError(f"stage {s + 1} was traced receiving {list(assumed[0])} "
                               f"({assumed[1]}) where stage {s} gives {list(meta[0])} "
                               f"({meta[1]}); give stage {s + 1}'s PipelineStage input_args")
        boundary[(chain, s + 1)] = meta


def _user_input_meta(stage):
    meta = getattr(getattr(stage, "_user_meta", None), "inputs", None)
    if not meta:
        return None
    first = meta[0]
    return tuple(first.shape), first.dtype


def trace_rank(rank, mesh, model, parallelize, batch_of_rank, loss, optimizer, *, fake,
               context=None, boundary=None, train_step=None):
    """The rank's trace. `boundary` (shared by the ranks, traced in pipeline order):
    what each pipeline stage receives (_stage_inputs), and the schedule steps a
    driven train_step runs (`steps`: a rank whose train_step runs more is traced
    again, for that number, and so are the ranks after it)."""
    from loom.torch import pipeline
    boundary = {} if boundary is None else boundary
    try:
        return _trace_rank(rank, mesh, model, parallelize, batch_of_rank, loss, optimizer,
                           fake=fake, context=context, boundary=boundary,
                           train_step=train_step)
    except pipeline.MoreSteps as e:
        if boundary.get("steps", 1) != 1:
            raise CaptureError(
                f"rank {rank}: the train_step calls the pipeline schedule's step {e.steps} "
                f"times where the ranks traced before call it {boundary['steps']} times; "
                "captured: step k of K given the k-th of K equal consecutive pieces of the "
                "batch's rows (or the whole batch, once), the same K on every rank") from None
        boundary.clear()   # what the stages receive, learnt anew with the smaller micro-batches
        boundary["steps"] = e.steps
    try:
        return _trace_rank(rank, mesh, model, parallelize, batch_of_rank, loss, optimizer,
                           fake=fake, context=context, boundary=boundary,
                           train_step=train_step)
    except pipeline.MoreSteps as e:
        raise CaptureError(
            f"rank {rank}: the train_step calls the pipeline schedule's step {e.steps} times "
            f"where its first calls said {boundary['steps']}; captured: step k of K given "
            "the k-th of K equal consecutive pieces of the batch's rows, or the whole batch "
            "once") from None


def _trace_rank(rank, mesh, model, parallelize, batch_of_rank, loss, optimizer, *, fake,
                context, boundary, train_step):
    from loom.torch import pipeline
    names, sizes = mesh_shape(mesh)
    world = math.prod(sizes)
    with contextlib.ExitStack() as stack:
        stack.enter_context(fake_process_group(rank, world))
        from torch.distributed.device_mesh import init_device_mesh
        # The mesh's table of ranks is real (DeviceMesh reads it); the model is fake.
        device_mesh = init_device_mesh("cpu", sizes, mesh_dim_names=names)
        # The model is fake (no memory); the launcher's parallelize runs outside fake
        # mode, so that the meshes it slices keep real tables of ranks.
        with maybe_fake(fake) as mode:
            module = model()
        in_fake = (lambda: mode) if mode is not None else contextlib.nullcontext
        if not isinstance(module, torch.nn.Module):
            raise CaptureError(f"model() gave a {type(module).__name__}, not a torch.nn.Module")
        result = parallelize(module, device_mesh)
        pipe = pipeline.schedule_of(result)
        if pipe is not None:
            module = pipeline.StageModules([st.submod for st in pipe.stages], pipe.schedule)
            pipe.driven = train_step is not None
            pipe.repeat(boundary.get("steps", 1) if pipe.driven else 1)
        elif isinstance(result, torch.nn.Module):
            module = result
        from loom.torch import fsdp
        managed = fsdp.managed_params(module)
        opt = optimizer(list(module.parameters()))
        recorder = Recorder()
        views = {fqn: fsdp.unsharded_view(m) for fqn, m in managed.items()}
        batch = batch_of_rank(rank, device_mesh)
        body = None
        if pipe is not None:
            microbatches = pipeline.microbatches(batch, pipe.total_microbatches)
            if not pipe.driven:
                batch = microbatches
            chain = tuple(c for i, c in enumerate(coordinate_of(rank, sizes))
                          if names[i] != PIPELINE_DIM)
            with in_fake():
                _stage_inputs(pipe, microbatches, boundary, chain, views)
            weight_names = {st.stage_index: [n for n, _ in st.submod.named_parameters()] +
                            [n for n, _ in st.submod.named_buffers()] for st in pipe.stages}
            param_names = [n for n, _ in module.named_parameters()]
            body = pipeline.pipeline_body(pipe, weight_names, param_names,
                                          lambda s: boundary[(chain, s)],
                                          microbatches if pipe.driven else None)
        with in_fake():
            trace = trace_step(module, batch, loss, opt, fake=fake, recorder=recorder,
                               param_views=views, context=context,
                               optimizer_site=site_of(optimizer), body=body,
                               train_step=train_step)
        groups = _groups()
        _keep_mesh_tables(trace, recorder, sizes)
    return RankTrace(rank=rank, coordinate=coordinate_of(rank, sizes), trace=trace,
                     recorder=recorder, groups=groups, managed=managed, pipeline=pipe)
