"""What a rank's collectives and redistributions lower to: a DTensor placement
change as the collectives and local copies it means, mesh dim by mesh dim in torch's
own order; functional and in-place c10d collectives over their process groups; a
pipelined rank's sum of its micro-batches' gradient shares; and, once every rank is
lowered, each collective's members joined into one plan collective and each
reduction's result claiming the union of its members' shares."""

import collections
import dataclasses
import functools
import math
from fractions import Fraction

import torch

import loom
from loom.torch import claims as C
from loom.torch import norm_partial
from loom.torch import stage_norms
from loom.torch.errors import CaptureError
from loom.torch.lowered_values import MaskedIds, VocabMask
from loom.torch.spec_index import _ALL_REDUCE, _WAIT

aten = torch.ops.aten


class _SpecOf:
    """A placement seen as a DTensor spec of one mesh dim (norm_partial.is_partial_norm)."""

    def __init__(self, placement):
        self.placements = (placement,)


class _C10dResult(list):
    """What a c10d collective returns (its tensors, its work), indexed by getitem."""


def _reduce_of(partial):
    """Loom's reduce op of a Partial: sum, avg or max."""
    op = getattr(partial, "reduce_op", "sum")
    if op in ("sum", "avg", "max"):
        return op
    raise CaptureError(f"a reduction by {op} has no Loom collective")


@functools.lru_cache(maxsize=None)
def _meaning(kind, reduce, members, dim, dim2, dims):
    """loom.collective_meaning, read once per kind, group size and dims (its moves are
    members squared): (its combining op or None, its scale, the output dims, and per
    member the region of its own input it moves and where in its output)."""
    meaning = loom.collective_meaning(kind, reduce, members, dim, dim2, list(dims))
    own = {m["target"]: (m["from"], m["to"]) for m in meaning["moves"]
           if m["target"] == m["source"]}
    return (meaning["reduce"], Fraction(*meaning["scale"]), tuple(meaning["output_dims"]),
            own)


def collective_output(kind, reduce, group, device, claim, dims, dim=-1, dim2=-1):
    """What `device`'s output of a collective of `kind` over `group` (global ranks, in
    member order) holds, its input claiming `claim` with local dims `dims`: (the
    claim, the dims), from the collective's one definition in ir
    (loom.collective_meaning, ir/collective_semantics.h). The region is the input's,
    moved as the collective moves the member's own input; a reduction's result is
    complete, at the factor its combination makes: shares of a sum add to the value
    at their own factor, copies of a complete value to len(group) times it, times the
    collective's own scale (1/n for an average); a maximum of either is the value."""
    try:
        combine, factor, out_dims, own = _meaning(kind, reduce or "sum", len(group), dim, dim2,
                                                  tuple(dims))
    except ValueError as e:
        raise CaptureError(f"a {kind} over ranks {list(group)} of a {list(dims)} value: {e}")
    moved_from, moved_to = own[list(group).index(device)]
    box = []
    for (begin, _), (a, _), (b, _), size in zip(claim.box, moved_from, moved_to, out_dims):
        box.append((begin + a - b, begin + a - b + size))
    if combine is None:
        return dataclasses.replace(claim, box=tuple(box)), out_dims
    scale = claim.scale
    if combine == "sum":
        if claim.part == C.FULL:
            scale = scale * len(group)
        scale = scale * factor
    return dataclasses.replace(claim, box=tuple(box), part=C.FULL, combine="sum",
                               scale=scale), out_dims


class RankCollectives:
    """RankLowering's collectives (a mixin: the walk is in plan.RankLowering)."""

    # ---- redistributions ----------------------------------------------------------------
    def _redistribute(self, node, r):
        from torch.distributed.tensor._redistribute import _gen_transform_infos
        from torch.distributed.tensor.placement_types import Partial, Replicate, Shard
        source_node = self._find(r.input_node)
        # A redistribution may read a tensor an earlier one updated in place (the
        # rows of a vocabulary piece's output zeroed before its reduction): in Loom's
        # terms the same value.
        while source_node not in self.env and source_node.name in self.rank.recorder.glue and \
                hasattr(source_node.target, "_schema") and \
                source_node.target._schema.name.endswith("_"):
            source_node = source_node.args[0]
        v = self.env[source_node]
        self.image[node] = self.image.get(source_node)
        infos = _gen_transform_infos(r.source, r.target)
        coord = C.coordinate_in(r.source.mesh, self.device)
        shared = [info for info in infos
                  if isinstance(info.src_dst_placements[0], Replicate) and
                  norm_partial.is_partial_norm(_SpecOf(info.src_dst_placements[1]))]
        if shared and len(shared) == len(infos):
            # A norm made a share of a partial norm along mesh dims it is replicated
            # over (to stack it with the norms of shards): norm_partial.WholeNorm.
            self.env[node] = self._norm_shared(v, shared, coord)
            return
        if isinstance(v, (norm_partial.PartialNorm, norm_partial.StackedNorms,
                          norm_partial.WholeNorm, stage_norms.StackedRows)):
            self.env[node] = self._complete_norm(node, r, v, infos)
            return
        # Mesh dims whose partial sums are still to be reduced: a reduction over one
        # of several leaves the sum over its group's shares (_members_part).
        pending = {i for i, p in enumerate(r.source.placements) if isinstance(p, Partial)}
        for step, info in enumerate(infos):
            a, b = info.src_dst_placements
            mesh_dim = info.mesh_dim
            n = r.source.mesh.size(mesh_dim)
            key = (r.index, step)
            group = _group_in(r.source.mesh, mesh_dim, self.device)
            if isinstance(a, Partial) and isinstance(b, (Replicate, Shard)):
                reduce = _reduce_of(a)
                kind = "all_reduce" if isinstance(b, Replicate) else "reduce_scatter"
                attrs = {"reduce": reduce} if kind == "all_reduce" else \
                    {"reduce": reduce, "dim": b.dim}
                claim, dims = collective_output(kind, reduce, group, self.device, v.claim,
                                                v.dims, dim=-1 if kind == "all_reduce"
                                                else b.dim)
                pending.discard(mesh_dim)
                if pending and v.claim.part != C.FULL:
                    part = self._members_part(v.claim.part, group)
                    if part is not None:
                        claim = dataclasses.replace(claim, part=part)
                v = self._collective(key, group, kind, attrs, v, claim, dims)
            elif isinstance(a, Shard) and isinstance(b, Replicate):
                v = self._collective(key, group, "all_gather", {"dim": a.dim}, v,
                                     *collective_output("all_gather", None, group, self.device,
                                                        v.claim, v.dims, dim=a.dim))
            elif type(a).__name__ == "_StridedShard" or type(b).__name__ == "_StridedShard":
                self.unsupported(f"redistribution from {a} to {b} along one mesh dim")
            elif isinstance(a, Replicate) and type(b).__name__ == "_MaskPartial":
                # Ids for a vocabulary-split table: the rank's piece of the vocabulary.
                vocab = b.offset_shape[b.offset_dim]
                lo, hi = C.chunk(vocab, n, coord[mesh_dim])
                if step != len(infos) - 1:
                    self.unsupported("ids masked for a vocabulary piece, then redistributed")
                self.env[node] = MaskedIds(v, lo, hi - lo)
                return
            elif isinstance(a, Replicate) and isinstance(b, Partial) and \
                    _reduce_of(b) == "sum":
                # A replicated value made a share of a sum (a bias added to partial
                # products): torch divides it by n on every rank; the plan keeps it on
                # the first rank and zeros on the others, the same sum exactly.
                if coord[mesh_dim] != 0:
                    out = self.doc.value(self.device, dataclasses.replace(v.claim, part=C.EMPTY),
                                         v.dtype, v.dims)
                    self.doc.task(self.device, -1, "fill",
                                  {"shape": list(v.dims), "value": 0.0, "dtype": v.dtype}, [],
                                  [out], self.origin.get("phase", "forward"), -1, self.origin)
                    v = out
            elif isinstance(a, Replicate) and isinstance(b, Shard):
                d = b.dim
                lo, hi = C.chunk(v.dims[d], n, coord[mesh_dim])
                box = list(v.claim.box)
                begin = box[d][0]
                box[d] = (begin + lo, begin + hi)
                dims = list(v.dims)
                dims[d] = hi - lo
                out = self.doc.value(self.device, dataclasses.replace(v.claim, box=tuple(box)),
                                     v.dtype, dims)
                self.doc.task(self.device, -1, "slice", {"dim": d, "begin": lo, "end": hi}, [v],
                              [out], self.origin.get("phase", "forward"), -1, self.origin)
                v = out
            else:
                self.unsupported(f"redistribution from {a} to {b}")
        # What DTensor says the result holds.
        v = self._claimed(v, r.target) if v.id >= 0 else v
        self.env[node] = v

    def _members_part(self, part, group):
        """The shares of a sum the ranks of `group` hold together, where this rank's
        `part` is its share of the batch's rows (a data-parallel gradient's): each
        member's rows, as the batch is split over the data-parallel dims in mesh
        order. None where `part` is no such share."""
        sizes, dims = tuple(self.mesh_sizes), tuple(self.data_dims)
        if not sizes or not dims:
            return None
        parts = math.prod(sizes[i] for i in dims)

        def share(rank):
            coord = C.coordinate_of(rank, sizes)
            index = 0
            for i in dims:
                index = index * sizes[i] + coord[i]
            return (Fraction(index, parts), Fraction(index + 1, parts))
        if part != (share(self.device),):
            return None
        merged = []
        for begin, end in sorted(share(g) for g in group):
            if merged and merged[-1][1] == begin:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((begin, end))
        return tuple(merged)

    def _norm_shared(self, v, steps, coord):
        """`v` made a share of a partial norm along the mesh dims of `steps` (torch
        divides it by n^(1/p) on each of their ranks, so the ranks' p-th powers sum to
        its own). A whole norm stays whole (WholeNorm); a partial one (the norm of a
        shard along other dims) keeps its sum of squares on the first rank along those
        dims and zero on the others, so that the sums over every dim count it once."""
        if isinstance(v, norm_partial.WholeNorm):
            return v
        if isinstance(v, norm_partial.PartialNorm):
            if any(coord[info.mesh_dim] != 0 for info in steps):
                sq = v.squares
                zero = self.doc.value(self.device, dataclasses.replace(sq.claim, part=C.EMPTY),
                                      sq.dtype, sq.dims)
                self.doc.task(self.device, -1, "fill",
                              {"shape": list(sq.dims), "value": 0.0, "dtype": sq.dtype}, [],
                              [zero], self.origin.get("phase", "backward"), -1, self.origin)
                v = dataclasses.replace(v, squares=zero)
            return v
        if isinstance(v, (norm_partial.StackedNorms, stage_norms.StackedRows)):
            self.unsupported("a stack of partial norms made a partial norm again")
        return norm_partial.WholeNorm(v)

    def _complete_norm(self, node, r, marker, infos):
        """A partial norm made whole: the sums of squares all-reduced over every mesh
        dim DTensor combines them along, then the step's square roots (and stack)."""
        steps = []
        for step, info in enumerate(infos):
            a, b = info.src_dst_placements
            if not norm_partial.is_partial_norm(_SpecOf(a)) or type(b).__name__ != "Replicate":
                self.unsupported(f"a partial norm redistributed from {a} to {b}")
            steps.append((step, info.mesh_dim))
        count = iter(range(1 << 30))

        # DTensor all-reduces the sums of squares once per mesh dim; after the first
        # of two a rank holds the sum over some of the shards, which no claim names.
        # Loom reduces them once over every rank of those dims: the same sums.
        group = _group_across(r.source.mesh, [mesh_dim for _, mesh_dim in steps],
                              self.device)

        def reduce_squares(squares):
            key = (r.index, steps[0][0], next(count))
            return self._collective(key, group, "all_reduce", {"reduce": "sum"}, squares,
                                    *collective_output("all_reduce", "sum", group,
                                                       self.device, squares.claim,
                                                       squares.dims))
        return norm_partial.complete(self, marker, reduce_squares)

    # ---- loss parallel's masked vocabulary pieces and collectives -------------------
    def _mask_window(self, node, w):
        """ids masked to the rank's vocabulary piece (MaskedIds; Loom's ops mask them
        themselves), or a pick over the piece summed over the pieces (the masking is
        the pick's own: it reads nothing outside the piece)."""
        src = self._find(w.input_node)
        v = self.env[src]
        self.image[node] = self.image.get(src)
        coord = C.coordinate_in(w.mesh, self.device)
        n = w.mesh.size(w.mesh_dim)
        if w.kind == "partition":
            vocab = w.placement.offset_shape[w.placement.offset_dim]
            lo, hi = C.chunk(vocab, n, coord[w.mesh_dim])
            ids = MaskedIds(v, lo, hi - lo)
            self.env[node] = ids
            if w.mask_node:
                self.env[self._find(w.mask_node)] = VocabMask(ids)
            return
        key = ("masked sum", self._masked_sums)
        self._masked_sums += 1
        group = _group_in(w.mesh, w.mesh_dim, self.device)
        self.env[node] = self._collective(key, group, "all_reduce", {"reduce": "sum"}, v,
                                          *collective_output("all_reduce", "sum", group,
                                                             self.device, v.claim, v.dims))

    def _vocab_mask_op(self, node):
        """torch's loss-parallel backward turns the mask into the update it writes:
        mask.to(dtype) - 1 (VocabMask)."""
        m = self.env[node.args[0]] if node.args and node.args[0] in self.env else None
        if isinstance(m, VocabMask) and node.target is aten._to_copy.default:
            self.env[node] = dataclasses.replace(m, dtype="float")
        elif isinstance(m, VocabMask) and m.dtype == "float" and not m.minus_one and \
                node.target is aten.sub.Tensor and len(node.args) == 2 and \
                node.args[1] == 1 and node.kwargs.get("alpha", 1) == 1:
            self.env[node] = dataclasses.replace(m, minus_one=True)
        else:
            self.unsupported(f"'{node.target}' reads the mask of a vocabulary piece")

    def _functional_collective(self, node):
        """A collective the rank's code calls itself (functional collectives, as loss
        parallel's log-softmax does): its result is the same piece of the same spec
        tensor, summed (or maximized) over the group."""
        if node.target is _WAIT:
            src = node.args[0]
            self.env[node] = self.env[src]
            self.image[node] = self.image.get(src)
            return
        if node.target is not _ALL_REDUCE:
            self.unsupported(f"collective '{node.target}' outside a DTensor redistribution")
        src, reduce, group_name = node.args[:3]
        v = self.env[src]
        ranks = self.rank.groups.get(group_name)
        if ranks is None:
            self.unsupported(f"an all-reduce over process group '{group_name}', which the "
                             "rank's program does not know")
        if reduce not in ("sum", "max", "avg"):
            self.unsupported(f"an all-reduce by {reduce}")
        key = ("functional", tuple(ranks), self._functionals["functional", tuple(ranks)])
        self._functionals["functional", tuple(ranks)] += 1
        self.env[node] = self._collective(key, tuple(ranks), "all_reduce", {"reduce": reduce},
                                          v, *collective_output("all_reduce", reduce, ranks,
                                                                self.device, v.claim, v.dims))
        self.image[node] = self.image.get(src)

    def _c10d_all_reduce(self, node):
        """An in-place all-reduce the rank's code calls itself (`dist.all_reduce(t)`,
        in a training step or a gradient hook): each tensor's result is the same piece
        of the same tensor, combined over the process group as its reduce op says."""
        from loom.torch.rules.collectives import c10d_group_name, c10d_reduce_name
        tensors = node.args[0]
        name = c10d_group_name(self.trace.module, node.args[1])
        ranks = self.rank.groups.get(name) if name is not None else None
        if ranks is None:
            self.unsupported(f"an all-reduce over process group '{name}', which the rank's "
                             "program does not know")
        reduce = c10d_reduce_name(self.trace.module, node.args[2])
        if reduce not in ("sum", "max", "avg"):
            self.unsupported(f"an all-reduce by {reduce}")
        outs = []
        for t in tensors:
            v = self.env[t]
            # A pipeline stage's squared norm: its sum of squares, summed (stage_norms.py).
            squared = v if isinstance(v, stage_norms.SquaredNorm) else None
            if squared is not None:
                v = squared.partial.squares
            key = ("c10d", tuple(ranks), self._functionals["c10d", tuple(ranks)])
            self._functionals["c10d", tuple(ranks)] += 1
            out = self._collective(key, tuple(ranks), "all_reduce", {"reduce": reduce}, v,
                                   *collective_output("all_reduce", reduce, ranks, self.device,
                                                      v.claim, v.dims))
            outs.append(out if squared is None else stage_norms.ReducedSquares(squared.partial,
                                                                               out))
        self.env[node] = _C10dResult([_C10dResult(outs), None])
        self.image[node] = self.image.get(tensors[0]) if tensors else None

    def _collective(self, key, group, kind, attrs, v, claim, dims):
        """This rank's part in a collective of `group` (global ranks, in order)."""
        out = self.doc.value(self.device, claim, v.dtype, dims)
        self.doc.produced.add(out.id)
        if claim.scale != v.claim.scale and v.claim.scale != 0:
            factor = claim.scale / v.claim.scale
            how = {"avg": "averages", "sum": "sums"}.get(attrs.get("reduce"), "combines")
            self.doc.scalings.append(dict(
                value=out.id, device=self.device, factor=factor,
                what=f"a {kind} that {how} over {len(group)} ranks", origin=self.origin))
        self.collective_log.append(dict(key=key, group=tuple(group), kind=kind, attrs=attrs,
                                        input=v, output=out, origin=self.origin,
                                        seq=self.doc.next_seq()))
        return out


# ---------------------------------------------------------------------------------
# All ranks together.

def _group_in(mesh, mesh_dim, rank):
    """The global ranks of `mesh` (a DeviceMesh, as `rank` sees it) that differ from
    `rank` only along `mesh_dim`, in order along it."""
    index = list(C.coordinate_in(mesh, rank))
    index[mesh_dim] = slice(None)
    return tuple(int(r) for r in C.table_for(mesh, rank)[tuple(index)].flatten())


def _group_across(mesh, mesh_dims, rank):
    """The global ranks of `mesh` that differ from `rank` only along `mesh_dims`, in
    row-major order of those dims."""
    index = list(C.coordinate_in(mesh, rank))
    for d in mesh_dims:
        index[d] = slice(None)
    return tuple(int(r) for r in C.table_for(mesh, rank)[tuple(index)].flatten())


def _groups_along(mesh_sizes, mesh_dims):
    """For each rank, the ranks sharing every coordinate but those of `mesh_dims` (a
    dim or a tuple of dims), in row-major order of those."""
    import itertools
    dims = (mesh_dims,) if isinstance(mesh_dims, int) else tuple(mesh_dims)
    ranks = {}

    def rank_of(coord):
        r = 0
        for c, s in zip(coord, mesh_sizes):
            r = r * s + c
        return r
    for coord in itertools.product(*[range(s) for s in mesh_sizes]):
        members = []
        for sub in itertools.product(*[range(mesh_sizes[d]) for d in dims]):
            c = list(coord)
            for d, k in zip(dims, sub):
                c[d] = k
            members.append(rank_of(c))
        ranks[rank_of(coord)] = members
    return ranks


def assemble_collectives(doc, lowerings, mesh_sizes):
    by_key = collections.defaultdict(dict)  # (key, group) -> {rank: entry}
    for L in lowerings:
        for e in L.collective_log:
            by_key[(e["key"], e["group"])][L.device] = e
    for (key, group), members in by_key.items():
        outside = [r for r in members if r not in group]
        if outside:
            raise CaptureError(f"ranks {outside} take part in a collective of ranks "
                               f"{list(group)} they are not members of")
        missing = [r for r in group if r not in members]
        if missing:
            raise CaptureError(f"ranks {missing} do not take part in a collective of ranks "
                               f"{sorted(members)} ({next(iter(members.values()))['kind']})")
        entries = [members[r] for r in group]
        kinds = {e["kind"] for e in entries}
        if len(kinds) != 1:
            raise CaptureError(f"ranks {list(group)} run different collectives at one place: "
                               f"{sorted(kinds)}")
        e0 = entries[0]
        item = {"id": len(doc.collectives), "kind": e0["kind"],
                "reduce": e0["attrs"].get("reduce", "sum"), "devices": list(group),
                "inputs": [e["input"].id for e in entries],
                "outputs": [e["output"].id for e in entries],
                "dim": e0["attrs"].get("dim", -1), "dim2": -1,
                "phase": e0["origin"].get("phase", "forward"), "layer": -1}
        doc.collectives.append(item)
        doc.origin_of_collective[item["id"]] = e0["origin"]
        for r, e in zip(group, entries):
            doc.seq_of_collective[(item["id"], r)] = e["seq"]


def _union(parts):
    """The union of value parts (overlaps merged: a sum counting a piece twice is
    the verifier's to find, not the claim's)."""
    pieces = sorted(x for part in parts for x in part)
    out = []
    for lo, hi in pieces:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def repair_sum_parts(doc):
    """A pipelined rank reduces each micro-batch's gradient on its own (FSDP's
    reduce-scatter, a tensor-parallel all-reduce of a norm weight's): the result is
    complete only over the micro-batch's rows, a share of the step's sum, which each
    member's lowering cannot know alone. Once the collectives are assembled, each
    reduction's result claims the union of its members' shares, and each local sum
    of micro-batches the union of its operands', in the order they were made."""
    items = []
    for t in doc.tasks:
        if t["op"] == -1 and t["kind"] in ("accumulate", "scale", "slice"):
            items.append((t["seq"], 0, t))
    for c in doc.collectives:
        if c["kind"] in ("all_reduce", "reduce_scatter"):
            seq = max(doc.seq_of_collective[(c["id"], d)] for d in c["devices"])
            items.append((seq, 1, c))
    items.sort(key=lambda x: (x[0], x[1]))
    changed = True
    while changed:  # ranks' orders interleave: until nothing changes (a few passes)
        changed = False
        for _, is_collective, item in items:
            parts = [doc.values[i].claim.part for i in item["inputs"]]
            if any(p == C.EMPTY for p in parts) and not is_collective:
                continue
            part = parts[0] if item.get("kind") in ("scale", "slice") else _union(parts)
            if part == C.EMPTY:
                continue
            for o in item["outputs"]:
                v = doc.values[o]
                if v.claim.part != part:
                    doc.values[o] = dataclasses.replace(
                        v, claim=dataclasses.replace(v.claim, part=part))
                    changed = True
