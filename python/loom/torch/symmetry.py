"""The ranks of one pipeline rank run one program, up to their coordinate: traced once.

A torch.distributed job is SPMD: every rank runs the same Python code, and the ranks'
programs differ only where that code reads the rank. Under the capture's fake
process group every such read goes through the group's rank (ProcessGroup.rank and
its backend's, which dist.get_rank reads) or what a DeviceMesh computed from it (its
coordinate, its rank: get_coordinate, get_local_rank, get_rank). RankReads watches
them while a rank is traced and finds, for each, the program's code that caused it
and the torch function it called there (the entry point):

- an entry point whose use of the rank Loom models from the rank's coordinate:
  modules and ops (DTensor's dispatch under them lays out shards and masks), autograd,
  the optimizers, DTensor's API and parallel styles, FSDP2 and replicate, pipelining,
  building and slicing meshes. Such a read makes no program of its own, with one
  condition: every shard is as large as every other (Shard of a dim its mesh dim
  divides), which `uneven_layout` checks (torch.chunk's smaller last piece would give
  the last rank other shapes), and every process group is a slice of the mesh
  (`unsliced_group`);
- the rank read by the program itself, or handed to it by any other torch function
  (a sampler's indices, a shard's offset, new_group's membership, the random state),
  may make the ranks' programs differ. A read along the pipeline dim only (a
  launcher picking its stage by its pipeline rank) is the same on every rank the
  trace stands for and is allowed.

When the representative of each pipeline rank (coordinate 0 along every other mesh
dim) was traced with no read of the second kind, even shards and sliced groups, every
rank of the pipeline rank stands in with that trace (`stand_in`); otherwise every rank
is traced (api.verify). plan.py then lowers a few of the stand-ins and writes the
others' programs from them (plan_symmetry.py).
"""

import contextlib
import dataclasses
import logging
import os
import sys

import torch

from loom.torch.claims import coordinate_of, rank_of

_TORCH = os.path.dirname(torch.__file__) + os.sep
_LOOM_TORCH = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _torch_files(*paths):
    return tuple(_TORCH + p.replace("/", os.sep) for p in paths)


# Where the rank is read from, not what reads it: the functions that hand out the
# rank (and the wrappers around them) pass it on to their caller.
_ACCESSOR_FILES = _torch_files("distributed/distributed_c10d.py",
                               "distributed/device_mesh.py", "distributed/c10d_logger.py")
_ACCESSORS = {"get_rank", "get_local_rank", "get_coordinate", "get_group_rank", "wrapper",
              "_get_msg_dict"}
# Frames that only call through (decorators, context managers, Loom's own watches
# and recorders around torch's functions).
# Python's logging passes through too: a log record that names the rank (torch's
# "[rank0]:" prefix) is written where the program logs, and computes nothing.
_WRAPPERS = _torch_files("_dynamo/", "_compile.py", "utils/_contextlib.py",
                         "distributed/c10d_logger.py", "_logging/") + tuple(
    _LOOM_TORCH + f for f in ("symmetry.py", "rank_trace.py")) + (
    os.path.dirname(logging.__file__) + os.sep,)
# The torch entry points a program may call, whose use of the rank Loom models from
# the rank's coordinate: modules and ops (DTensor's dispatch under them), autograd and
# the optimizers, DTensor's API and parallel styles, FSDP2 and replicate, pipelining,
# and building and slicing meshes. Any other torch function that reads the rank (a
# sampler, a shard offset helper, new_group's membership, the random state) may
# hand its caller a value that differs per rank.
_MODELED_ENTRIES = _torch_files(
    "nn/", "_ops.py", "_tensor.py", "functional.py", "autograd/", "optim/", "_functorch/",
    "fx/", "_subclasses/", "_refs/", "_decomp/", "_prims", "overrides.py", "utils/_pytree.py",
    "utils/_python_dispatch.py", "utils/hooks.py",
    "distributed/tensor/_api.py", "distributed/tensor/_dispatch.py",
    "distributed/tensor/_redistribute.py", "distributed/tensor/_ops/",
    "distributed/tensor/_sharding_prop.py", "distributed/tensor/placement_types.py",
    "distributed/tensor/parallel/", "distributed/fsdp/", "distributed/_composable/",
    "distributed/pipelining/", "distributed/device_mesh.py",
    "distributed/_functional_collectives.py")


def _is_loom(name):
    return name.startswith(_LOOM_TORCH)


class RankReads(contextlib.AbstractContextManager):
    """Watches the reads of the rank while entered; `.outside` lists the places
    ("file.py:12") of those that torch.distributed's own code did not make. A read
    of the rank along launch mesh dims in `same` (the pipeline dim: a launcher picks
    its stage by its pipeline rank) is the same on every rank the trace stands for,
    and is no read here: a group's rank in a group spanning those dims only, a
    DeviceMesh's local rank along a mesh dim that spans those dims only."""

    def __init__(self, sizes=(), same=()):
        self.outside = []
        self._sizes = tuple(sizes)
        self._same = set(same)
        self._quiet = 0
        self._stack = contextlib.ExitStack()

    def _spans_same(self, ranks):
        """Whether global `ranks` differ only along the dims in `same`."""
        coords = [coordinate_of(int(r), self._sizes) for r in ranks]
        return bool(self._sizes) and all(
            k in self._same for k in range(len(self._sizes))
            if len({c[k] for c in coords}) > 1)

    def _group_spans_same(self, group):
        from torch.distributed.distributed_c10d import _world
        members = _world.pg_group_ranks.get(group)
        return members is not None and self._spans_same(members.keys())

    def _mesh_dim_spans_same(self, mesh, mesh_dim):
        try:
            dim = 0 if mesh_dim is None else (
                mesh.mesh_dim_names.index(mesh_dim) if isinstance(mesh_dim, str) else mesh_dim)
            table = mesh.mesh.movedim(dim, 0).reshape(mesh.mesh.shape[dim], -1)[:, 0]
        except (ValueError, AttributeError, IndexError, TypeError):
            return False
        return self._spans_same(table.tolist())

    def _note(self, depth):
        """A read of the rank, made `depth` frames up: outside if the program's own
        code reads it, directly (through an accessor) or from a torch function whose
        use of the rank Loom does not model (_MODELED_ENTRIES)."""
        if self._quiet:
            return
        frame = sys._getframe(depth)
        while frame is not None and frame.f_code.co_name in _ACCESSORS and \
                frame.f_code.co_filename.startswith(_ACCESSOR_FILES):
            frame = frame.f_back
        # Outward to the program's code (neither torch's nor Loom's): the torch
        # function it called (the outermost torch frame that is not a wrapper) is
        # the entry point. Reached from Loom's capture itself, the read is Loom's.
        entry = None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(_WRAPPERS):
                pass
            elif _is_loom(name):
                return
            elif name.startswith(_TORCH):
                entry = name
            else:
                break
            frame = frame.f_back
        if frame is None or (entry is not None and entry.startswith(_MODELED_ENTRIES)):
            return
        place = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        if place not in self.outside:
            self.outside.append(place)

    def __enter__(self):
        from torch._C._distributed_c10d import ProcessGroup
        from torch.distributed.device_mesh import DeviceMesh
        reads = self
        method = ProcessGroup.__dict__["rank"]  # as the class holds it (pybind11)
        rank = ProcessGroup.rank

        def watched_rank(group):
            if not reads._group_spans_same(group):
                reads._note(2)
            return rank(group)
        ProcessGroup.rank = watched_rank
        self._stack.callback(setattr, ProcessGroup, "rank", method)
        from torch._C._distributed_c10d import Backend
        backend_method = Backend.__dict__["rank"]
        backend_rank = Backend.rank

        def watched_backend_rank(backend):
            reads._note(2)
            return backend_rank(backend)
        Backend.rank = watched_backend_rank
        self._stack.callback(setattr, Backend, "rank", backend_method)

        local_rank = DeviceMesh.get_local_rank

        def watched_local_rank(mesh, mesh_dim=None):
            if not reads._mesh_dim_spans_same(mesh, mesh_dim):
                reads._note(2)
            reads._quiet += 1  # the reads it makes itself are this one
            try:
                return local_rank(mesh, mesh_dim)
            finally:
                reads._quiet -= 1
        DeviceMesh.get_local_rank = watched_local_rank
        self._stack.callback(setattr, DeviceMesh, "get_local_rank", local_rank)

        for key in ("_coordinate_on_dim", "_rank"):
            self._watch_attribute(DeviceMesh, key)
        return self

    def _watch_attribute(self, cls, key):
        """Reads of instance attribute `key` of `cls` instances are reads of the rank."""
        reads = self

        def get(obj):
            reads._note(2)
            try:
                return obj.__dict__[key]
            except KeyError:
                raise AttributeError(key) from None

        def put(obj, value):
            obj.__dict__[key] = value
        had = key in cls.__dict__
        previous = cls.__dict__.get(key)
        setattr(cls, key, property(get, put))
        if had:
            self._stack.callback(setattr, cls, key, previous)
        else:
            self._stack.callback(delattr, cls, key)

    def __exit__(self, *exc):
        self._stack.close()
        return False


def _specs(rank_trace):
    trace, recorder = rank_trace.trace, rank_trace.recorder
    specs = [ph.dtensor for ph in trace.placeholders if ph.dtensor is not None]
    specs += list(recorder.specs.values())
    for r in recorder.redistributions:
        specs += [r.source, r.target]
    return specs


def uneven_layout(rank_trace):
    """Why the ranks' shards differ in shape (a reason), or None: a DTensor sharded
    along a dim its mesh dim does not divide, or a vocabulary piece likewise."""
    for spec in _specs(rank_trace):
        sizes = [int(d) for d in spec.shape]
        for mesh_dim, placement in enumerate(spec.placements):
            d = getattr(placement, "dim", None)
            if d is None or not hasattr(placement, "is_shard") or not placement.is_shard():
                continue
            n = spec.mesh.size(mesh_dim)
            if sizes[d] % n:
                return (f"a tensor of shape {list(spec.shape)} is sharded along dim {d} "
                        f"over {n} ranks, unevenly")
            sizes[d] //= n
    for w in rank_trace.recorder.mask_windows.values():
        if w.kind == "partition":
            vocab = w.placement.offset_shape[w.placement.offset_dim]
            n = w.mesh.size(w.mesh_dim)
            if vocab % n:
                return f"a vocabulary of {vocab} is split over {n} ranks, unevenly"
    return None


def unsliced_group(rank_trace, sizes):
    """Why a process group of the traced rank is no slice of the launch mesh (every
    coordinate along the dims it spans, the others its rank's), or None: another
    rank's counterpart of such a group is not defined by the coordinates."""
    groups = list(rank_trace.groups.values())
    if rank_trace.pipeline is not None:
        groups.append(rank_trace.pipeline.pp_ranks)
    for members in groups:
        if rank_trace.rank not in members:
            continue
        coords = [coordinate_of(m, sizes) for m in members]
        spans = [k for k in range(len(sizes)) if len({c[k] for c in coords}) > 1]
        whole = 1
        for k in spans:
            whole *= sizes[k]
        if len(set(members)) != whole:
            return f"process group {sorted(members)} is no slice of the mesh"
    return None


def representatives(sizes, pp):
    """The rank traced for each pipeline rank (coordinate 0 along every other mesh
    dim), in pipeline order; rank 0 alone without a pipeline dim."""
    if pp is None:
        return [0]
    stride = 1
    for s in sizes[pp + 1:]:
        stride *= s
    return [p * stride for p in range(sizes[pp])]


def moved_group(group, source, target, sizes):
    """The group of `target` that is to it what `group` (global ranks, containing
    `source`) is to `source`: its members, in order, with `target`'s coordinates
    along the mesh dims the group does not span. None if `source` is not in it."""
    if source not in group:
        return None
    coords = [coordinate_of(m, sizes) for m in group]
    spans = {k for k in range(len(sizes)) if len({c[k] for c in coords}) > 1}
    t = coordinate_of(target, sizes)
    return [rank_of(tuple(c[k] if k in spans else t[k] for k in range(len(sizes))), sizes)
            for c in coords]


def stand_in(rep, rank, sizes, data=None):
    """The RankTrace of `rank` from its pipeline rank's representative `rep`: the same
    program, its own rank, coordinate, process groups and pipeline group, and its own
    batch (`data`, placeholder name -> tensor)."""
    if rank == rep.rank:
        return rep
    groups = {}
    for name, members in rep.groups.items():
        moved = moved_group(members, rep.rank, rank, sizes)
        if moved is not None:
            groups[name] = moved
    pipe = rep.pipeline
    if pipe is not None:
        pipe = dataclasses.replace(pipe, pp_ranks=moved_group(pipe.pp_ranks, rep.rank, rank,
                                                              sizes))
    return dataclasses.replace(rep, rank=rank, coordinate=coordinate_of(rank, sizes),
                               groups=groups, pipeline=pipe, data=data)
