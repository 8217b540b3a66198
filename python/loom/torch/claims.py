"""Claims: the piece of a logical tensor a plan value says it holds (a box, one
interval per dim, and a value part, a set of disjoint intervals of [0, 1) that says
which share of a sum it is; docs/formats.md, "Value parts").

What DTensor says a local tensor holds becomes a claim here; so does what an op's
partition signature implies for a value torch says nothing about.
"""

import dataclasses
import functools
from fractions import Fraction

import loom

FULL = ((Fraction(0), Fraction(1)),)
EMPTY = ()


def _pieces(part):
    return [((lo.numerator, lo.denominator), (hi.numerator, hi.denominator)) for lo, hi in part]


def _part(pieces):
    return tuple((Fraction(*lo), Fraction(*hi)) for lo, hi in pieces)


@functools.lru_cache(maxsize=4096)
def members_of(part):
    """n where `part` is one of n > 1 equal shares ([k/n, (k+1)/n)), else None
    (ir::ValuePart::EqualShareCount, through the bindings)."""
    return loom.value_part_equal_shares(_pieces(part))


@functools.lru_cache(maxsize=4096)
def share(part, k, n):
    """Share k of n of `part`: every interval cut into n equal ones, the k-th kept
    (ir::ValuePart::Share, through the bindings)."""
    return _part(loom.value_part_share(_pieces(part), int(k), int(n)))


@functools.lru_cache(maxsize=4096)
def refine(part, lo, hi):
    """The fraction [lo, hi) of every interval of `part` (a reduction split again
    along another of its dims; ir::ValuePart::Refine, through the bindings)."""
    lo, hi = Fraction(lo), Fraction(hi)
    return _part(loom.value_part_refine(_pieces(part), (lo.numerator, lo.denominator),
                                        (hi.numerator, hi.denominator)))


def part_text(part):
    if part == FULL:
        return "full"
    if not part:
        return "0"

    def num(x):
        return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
    return "+".join(f"[{num(lo)},{num(hi)})" for lo, hi in sorted(part))


@dataclasses.dataclass
class Claim:
    tensor: int          # logical tensor id in the spec
    box: tuple           # ((begin, end), ...) per dim
    part: tuple = FULL
    combine: str = "sum"  # how a share that is neither full nor empty combines
    torch_says: bool = False  # the claim is DTensor's (else the signature's)
    # The multiple of its piece the value holds (docs/formats.md, "scale"): what the
    # program's own scalings make of it on its way (a rank's mean over its own tokens
    # where the model's step divides by all of them), from the data flow.
    scale: Fraction = Fraction(1)


def rational_of(x):
    """The rational a number stands for, as Loom reads a double (ir/plan.h,
    RationalOfDouble): the one with the smallest denominator, at most 2^24, whose
    double is `x`; the double's exact value where there is none."""
    exact = Fraction(x)
    near = exact.limit_denominator(1 << 24)
    return near if float(near) == float(x) else exact


def scale_text(scale):
    return str(scale.numerator) if scale.denominator == 1 else \
        f"{scale.numerator}/{scale.denominator}"


def chunk(size, n, k):
    """torch.chunk's k-th of n pieces of `size` elements: [begin, end)."""
    step = -(-size // n)
    begin = min(k * step, size)
    return begin, min(begin + step, size)


def coordinate_of(rank, sizes):
    """Global `rank`'s coordinate in the launch mesh of `sizes` (outermost dim first)."""
    coord = []
    for size in reversed(sizes):
        coord.append(rank % size)
        rank //= size
    return tuple(reversed(coord))


def rank_of(coord, sizes):
    """The global rank at `coord` of the launch mesh of `sizes` (coordinate_of's inverse)."""
    r = 0
    for c, s in zip(coord, sizes):
        r = r * s + c
    return r


def table_for(mesh, rank):
    """`mesh`'s table of global ranks as `rank` sees it. A sub-mesh a rank sliced
    (its tensor-parallel group) holds that rank's ranks; a rank standing in with
    another's trace (symmetry.py) sees the sub-mesh the same slice gives it: along
    the launch mesh dims the table does not span, its own coordinates."""
    table = getattr(mesh, "_loom_ranks", None)
    if table is None:
        table = mesh.mesh
    sizes = getattr(mesh, "_loom_launch", None)
    if sizes is None or bool((table == rank).any()):
        return table
    flat = [int(r) for r in table.flatten()]
    coords = [coordinate_of(r, sizes) for r in flat]
    spans = {k for k in range(len(sizes)) if len({c[k] for c in coords}) > 1}
    own = coordinate_of(rank, sizes)
    moved = [rank_of([c[k] if k in spans else own[k] for k in range(len(sizes))], sizes)
             for c in coords]
    import torch
    return torch.tensor(moved, dtype=table.dtype).reshape(table.shape)


def coordinate_in(mesh, rank):
    """The coordinate of global `rank` in `mesh` (a DeviceMesh, possibly a sub-mesh
    of the launch's mesh), from the mesh's own table of ranks (table_for)."""
    table = table_for(mesh, rank)
    where = (table == rank).nonzero()
    if where.shape[0] != 1:
        raise ValueError(f"rank {rank} is not in mesh {mesh}")
    return tuple(int(c) for c in where[0])


def from_dtensor_spec(spec, tensor, rank):
    """The claim of the local tensor of a DTensor of `spec` on global rank `rank`:
    Shard(d) cuts dim d as torch.chunk does, mesh dims applied in order; Partial
    makes the value share c of n of a sum (or of a maximum); Replicate keeps the
    whole (coordinates are the rank's in the spec's own mesh)."""
    coordinate = coordinate_in(spec.mesh, rank)
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard
    shape = tuple(int(d) for d in spec.shape)
    box = [[0, s] for s in shape]
    part = FULL
    combine = "sum"
    # The order shardings of one tensor dim apply in: mesh dims left to right, but a
    # _StridedShard (FSDP over a dim tensor parallelism already shards) after the
    # Shard of the later mesh dim it was split by.
    order = []
    strided = []
    for mesh_dim, placement in enumerate(spec.placements):
        if type(placement).__name__ == "_StridedShard":
            strided.append(mesh_dim)
        else:
            order.append(mesh_dim)
    for mesh_dim in strided:
        placement = spec.placements[mesh_dim]
        later = [k for k in order if k > mesh_dim and isinstance(spec.placements[k], Shard)
                 and spec.placements[k].dim == placement.dim]
        if len(later) != 1 or spec.mesh.size(later[0]) != placement.split_factor:
            raise ValueError(f"placement {placement} on mesh dim {mesh_dim} has no Loom claim")
        order.insert(order.index(later[0]) + 1, mesh_dim)
    for mesh_dim in order:
        placement = spec.placements[mesh_dim]
        n = spec.mesh.size(mesh_dim)
        c = coordinate[mesh_dim]
        if isinstance(placement, Shard) or mesh_dim in strided:
            d = placement.dim
            begin, end = box[d]
            lo, hi = chunk(end - begin, n, c)
            box[d] = [begin + lo, begin + hi]
        elif isinstance(placement, Partial):
            # Partial("avg") as Partial("sum"): the rank holds a share of the value,
            # here n times it (the average divides by n, a collective's meaning);
            # the factor a value holds comes from the data flow (Claim.scale), not
            # from the placement.
            op = getattr(placement, "reduce_op", "sum")
            if op == "max":
                combine = "max"
            elif op not in ("sum", "avg"):
                raise ValueError(f"Partial({op}) has no Loom value part")
            part = share(part, c, n)
        elif isinstance(placement, Replicate):
            continue
        else:
            raise ValueError(f"placement {placement} has no Loom claim")
    return Claim(tensor=tensor, box=tuple(tuple(b) for b in box), part=part, combine=combine,
                 torch_says=True)


def full_claim(tensor, dims):
    return Claim(tensor=tensor, box=tuple((0, int(d)) for d in dims), part=FULL)
