"""The ranks of one pipeline rank run one program, up to their coordinate: traced once.

A torch.distributed job is SPMD: every rank runs the same Python code, and the ranks'
programs differ only where that code reads the rank. Under the capture's fake
process group every such read goes through the group's rank (ProcessGroup.rank, which
dist.get_rank reads) or the coordinate a DeviceMesh computed from it (get_coordinate,
get_local_rank, its _coordinate_on_dim). RankReads watches both while a rank is
traced, and notes where each read comes from:

- torch.distributed's own code reads it (from Python, or from DTensor's C++ dispatch
  under some torch frame) to lay out shards (DTensor, FSDP), to build process
  groups, to place a vocabulary mask and to pick a pipeline stage. Loom's
  lowering computes each of those itself from the rank's coordinate (claims.py,
  plan.py's groups and masks), so such a read makes no program of its own, with one
  condition: every shard is as large as every other (Shard of a dim its mesh dim
  divides), which `uneven_layout` checks; torch.chunk's smaller last piece would give
  the last rank other shapes.
- any other code (the launcher's, the model's, a library's such as Hugging Face's,
  torch.distributed's random-number state, whose offsets differ per rank) may make
  the ranks' programs differ.

When the representative of each pipeline rank (coordinate 0 along every other mesh
dim) was traced with no read of the second kind and an even layout, every rank of
the pipeline rank stands in with that trace (`stand_in`); otherwise every rank is
traced (api.verify). plan.py then lowers a few of the stand-ins and writes the
others' programs from them (plan_symmetry.py).
"""

import contextlib
import dataclasses
import os
import sys

import torch

_TORCH = os.path.dirname(torch.__file__) + os.sep
_TORCH_DISTRIBUTED = os.path.dirname(torch.distributed.__file__) + os.sep
_LOOM_TORCH = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Where the rank is read from, not what reads it: the caller of these is the reader.
_ACCESSOR_FILES = tuple(_TORCH_DISTRIBUTED + f for f in (
    "distributed_c10d.py", "device_mesh.py", "c10d_logger.py"))
_ACCESSORS = {"get_rank", "get_local_rank", "get_coordinate", "get_group_rank", "wrapper",
              "_get_msg_dict"}
# torch.distributed code whose reads make per-rank values Loom does not model.
_PER_RANK_STATE = (_TORCH_DISTRIBUTED + os.path.join("tensor", "_random.py"),
                   _TORCH_DISTRIBUTED + os.path.join("tensor", "experimental") + os.sep)


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
        coords = [_coordinate(int(r), self._sizes) for r in ranks]
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
        if self._quiet:
            return
        frame = sys._getframe(depth)
        while frame is not None and frame.f_code.co_name in _ACCESSORS and \
                frame.f_code.co_filename.startswith(_ACCESSOR_FILES):
            frame = frame.f_back
        if frame is None:
            return
        name = frame.f_code.co_filename
        internal = name.startswith(_LOOM_TORCH) or (
            name.startswith(_TORCH) and not name.startswith(_PER_RANK_STATE))
        if not internal:
            place = f"{name}:{frame.f_lineno}"
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

        local_rank = DeviceMesh.get_local_rank

        def watched_local_rank(mesh, mesh_dim=None):
            quiet = reads._mesh_dim_spans_same(mesh, mesh_dim)
            reads._quiet += quiet
            try:
                return local_rank(mesh, mesh_dim)
            finally:
                reads._quiet -= quiet
        DeviceMesh.get_local_rank = watched_local_rank
        self._stack.callback(setattr, DeviceMesh, "get_local_rank", local_rank)

        key = "_coordinate_on_dim"

        def get(mesh):
            reads._note(2)
            return mesh.__dict__.get(key)

        def put(mesh, value):
            mesh.__dict__[key] = value
        had = key in DeviceMesh.__dict__
        previous = DeviceMesh.__dict__.get(key)
        setattr(DeviceMesh, key, property(get, put))
        if had:
            self._stack.callback(setattr, DeviceMesh, key, previous)
        else:
            self._stack.callback(delattr, DeviceMesh, key)
        return self

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


def representatives(sizes, pp):
    """The rank traced for each pipeline rank (coordinate 0 along every other mesh
    dim), in pipeline order; rank 0 alone without a pipeline dim."""
    if pp is None:
        return [0]
    stride = 1
    for s in sizes[pp + 1:]:
        stride *= s
    return [p * stride for p in range(sizes[pp])]


def _coordinate(rank, sizes):
    coord = []
    for size in reversed(sizes):
        coord.append(rank % size)
        rank //= size
    return tuple(reversed(coord))


def _rank(coord, sizes):
    r = 0
    for c, s in zip(coord, sizes):
        r = r * s + c
    return r


def moved_group(group, source, target, sizes):
    """The group of `target` that is to it what `group` (global ranks, containing
    `source`) is to `source`: its members, in order, with `target`'s coordinates
    along the mesh dims the group does not span. None if `source` is not in it."""
    if source not in group:
        return None
    coords = [_coordinate(m, sizes) for m in group]
    spans = {k for k in range(len(sizes)) if len({c[k] for c in coords}) > 1}
    t = _coordinate(target, sizes)
    return [_rank(tuple(c[k] if k in spans else t[k] for k in range(len(sizes))), sizes)
            for c in coords]


def stand_in(rep, rank, sizes):
    """The RankTrace of `rank` from its pipeline rank's representative `rep`: the same
    program, its own rank, coordinate, process groups and pipeline group."""
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
    return dataclasses.replace(rep, rank=rank, coordinate=_coordinate(rank, sizes),
                               groups=groups, pipeline=pipe)
