"""The plans of ranks that run one program (symmetry.py), written from a few of them.

Ranks standing in with one trace run the same ops; where their plans differ, they
differ by their coordinate. With every shard as large as every other (symmetry.py's
condition), what a rank's lowering computes from its coordinate is affine in it: the
boxes of its pieces (chunk k of n equal ones begins at k times their size), the
shares of a sum (share k of n), the members of its process groups and the ranks it
sends to (global ranks are sums of coordinate times stride), and the attributes made
of those (a slice of the rank's rows, its vocabulary piece).

So for each group of ranks with one trace, over the mesh dims its ranks span:
`bases` picks the rank at coordinate 0 along all of them (o), the ranks one step
along each (o + e_k), and the far corner; plan.py lowers those. `extend` writes
every other rank r = o + sum c_k e_k as X(o) + sum c_k (X(o + e_k) - X(o)) for every
number X of o's lowering (claims, attributes, groups, senders), after checking that
the bases lowered to the same structure and that this formula gives the corner's
lowering exactly. Anything else (a base that lowered differently, a failure found
while lowering) returns None, and plan.py lowers every rank.

The verifier still checks every claim but the inputs'; the inputs' claims (a
DTensor's shard, a rank's batch rows) are affine by the same argument. Scalars a
rank computes from its batch's data (its token count) are not: only ranks whose
batches give the same ones are written from one another (groups_of).
"""

import collections
import dataclasses
from fractions import Fraction
from types import SimpleNamespace

from loom.torch import claims as C
from loom.torch.claims import coordinate_of, rank_of


def groups_of(ranks):
    """Ranks that share a trace and the scalars their batches give it (a loss's token
    count: constants.py), grouped: lists of global ranks, or None when every rank has
    its own (nothing to write from others). What a rank computes from its batch's
    data is no function of its coordinate: ranks counting different numbers of
    tokens are lowered each."""
    from loom.torch import constants
    by_trace = collections.defaultdict(list)
    for t in ranks:
        by_trace[(id(t.trace), constants.data_scalars(t.trace, t.data))].append(t.rank)
    groups = list(by_trace.values())
    return groups if any(len(g) > 1 for g in groups) else None


def bases(groups, sizes):
    """{group index: (o, [steps], corner, spans), or None for a group whose ranks are
    all lowered} and the sorted list of the ranks to lower."""
    out = {}
    chosen = set()
    for gi, group in enumerate(groups):
        coords = [coordinate_of(r, sizes) for r in group]
        spans = [k for k in range(len(sizes)) if len({c[k] for c in coords}) > 1]
        o = tuple(min(c[k] for c in coords) for k in range(len(sizes)))
        steps = []
        for k in spans:
            step = list(o)
            step[k] += 1
            steps.append(rank_of(step, sizes))
        corner = list(o)
        for k in spans:
            corner[k] = max(c[k] for c in coords)
        corner = rank_of(corner, sizes)
        base = {rank_of(o, sizes), *steps, corner}
        if len(group) <= len(base) or any(r not in group for r in base):
            base = set(group)
            out[gi] = None
        else:
            out[gi] = (rank_of(o, sizes), steps, corner, spans)
        chosen |= base
    return out, sorted(chosen)


# ---------------------------------------------------------------------------------
# A rank's lowering as numbers and structure.

@dataclasses.dataclass
class _Record:
    values: list       # (tensor, box, part, combine, torch_says, dtype, dims)
    tasks: list        # (op, kind, attrs, inputs, outputs, phase, layer)
    task_meta: list    # (seq, origin)
    collectives: list  # (key, group, kind, attrs, input, output)
    coll_meta: list    # (seq, origin)
    receives: list     # (name, source device, source index, destination index)
    outputs: list      # index of each trace output's value, or None


def record(doc, L, values_of):
    """Rank L's lowering, with values as indexes into its own values."""
    own = values_of[L.device]
    index = {v.id: i for i, v in enumerate(own)}
    values = [(v.claim.tensor, v.claim.box, v.claim.part, v.claim.combine,
               v.claim.torch_says, v.dtype, v.dims, v.claim.scale) for v in own]
    tasks, task_meta = [], []
    for t in doc.tasks:
        if t["device"] != L.device:
            continue
        tasks.append((t["op"], t["kind"], t["attrs"], tuple(index[i] for i in t["inputs"]),
                      tuple(index[i] for i in t["outputs"]), t["phase"], t["layer"]))
        task_meta.append((t["seq"], doc.origin_of_task[t["id"]]))
    collectives = [(e["key"], e["group"], e["kind"], e["attrs"], index[e["input"].id],
                    index[e["output"].id]) for e in L.collective_log]
    coll_meta = [(e["seq"], e["origin"]) for e in L.collective_log]
    receives = []
    for e in doc.p2p:
        if e["destination"].device == L.device:
            src = e["source"]
            sender = {v.id: i for i, v in enumerate(values_of[src.device])}
            receives.append((e["name"], src.device, sender[src.id],
                             index[e["destination"].id]))
    outputs = [index[v.id] if v is not None and hasattr(v, "id") else None
               for v in L.results]
    return _Record(values, tasks, task_meta, collectives, coll_meta, receives, outputs)


class _Mismatch(Exception):
    pass


def _affine(x0, xs, cs):
    """x0 + sum c_k (x_k - x0) over numbers nested in tuples, lists and dicts; any
    other leaf must be the same in every x."""
    t = type(x0)
    if t is int or t is Fraction:
        if any(type(x) is not t for x in xs):
            raise _Mismatch
        r = x0
        for x, c in zip(xs, cs):
            if c and x != x0:
                r = r + c * (x - x0)
        return r
    if t is tuple or t is list:
        if any(type(x) is not t or len(x) != len(x0) for x in xs):
            raise _Mismatch
        return t(_affine(a, [x[i] for x in xs], cs) for i, a in enumerate(x0))
    if t is dict:
        if any(type(x) is not dict or x.keys() != x0.keys() for x in xs):
            raise _Mismatch
        return {k: _affine(a, [x[k] for x in xs], cs) for k, a in x0.items()}
    if any(x != x0 for x in xs):
        raise _Mismatch
    return x0


def _same(x0, xs):
    if any(x != x0 for x in xs):
        raise _Mismatch
    return x0


def _written(o, steps, cs):
    """The record of the rank c steps from o (see the module docstring)."""
    if any(len(s.values) != len(o.values) or len(s.tasks) != len(o.tasks) or
           len(s.collectives) != len(o.collectives) or len(s.receives) != len(o.receives)
           for s in steps):
        raise _Mismatch
    values = []
    for i, v in enumerate(o.values):
        others = [s.values[i] for s in steps]
        if all(x is v or x == v for x in others):
            values.append(v)
            continue
        tensor, box, part, combine, says, dtype, dims, scale = v
        for x in others:
            if (x[0], x[3], x[4], x[5], x[6], x[7]) != (tensor, combine, says, dtype, dims,
                                                        scale):
                raise _Mismatch
        values.append((tensor, _affine(box, [x[1] for x in others], cs),
                       _affine(part, [x[2] for x in others], cs), combine, says, dtype, dims,
                       scale))
    tasks = []
    for i, t in enumerate(o.tasks):
        others = [s.tasks[i] for s in steps]
        if all(x == t for x in others):
            tasks.append(t)
            continue
        for x in others:
            if x[:2] != t[:2] or x[3:] != t[3:]:
                raise _Mismatch
        tasks.append((t[0], t[1], _affine(t[2], [x[2] for x in others], cs)) + t[3:])
    collectives = []
    for i, e in enumerate(o.collectives):
        others = [s.collectives[i] for s in steps]
        collectives.append((_same(e[0], [x[0] for x in others]),
                            _affine(e[1], [x[1] for x in others], cs),
                            _same(e[2], [x[2] for x in others]),
                            _affine(e[3], [x[3] for x in others], cs),
                            _same(e[4], [x[4] for x in others]),
                            _same(e[5], [x[5] for x in others])))
    receives = []
    for i, e in enumerate(o.receives):
        others = [s.receives[i] for s in steps]
        receives.append((_same(e[0], [x[0] for x in others]),
                         _affine(e[1], [x[1] for x in others], cs),
                         _same(e[2], [x[2] for x in others]),
                         _same(e[3], [x[3] for x in others])))
    outputs = _same(o.outputs, [s.outputs for s in steps])
    return _Record(values, tasks, o.task_meta, collectives, o.coll_meta, receives, outputs)


def _comparable(r):
    return (r.values, r.tasks, r.collectives, r.receives, r.outputs)


def extend(doc, lowerings, ranks, sizes, plan):
    """The lowerings of every rank: `lowerings` (the bases') and one written for each
    other rank into `doc`; None when the ranks cannot be written from the bases
    (module docstring). `plan` (bases()'s first result) and the groups are the
    bases'."""
    if doc.failures:
        return None
    groups = groups_of(ranks)
    by_device = {L.device: L for L in lowerings}
    values_of = collections.defaultdict(list)
    for v in doc.values:
        values_of[v.device].append(v)
    records = {d: record(doc, L, values_of) for d, L in by_device.items()}
    written = {}
    try:
        for gi, group in enumerate(groups):
            chosen = plan.get(gi)
            if chosen is None:
                continue
            o, steps, corner, spans = chosen
            origin = coordinate_of(o, sizes)
            base_steps = [records[s] for s in steps]

            def at(rank):
                c = coordinate_of(rank, sizes)
                return [c[k] - origin[k] for k in spans]
            if _comparable(_written(records[o], base_steps, at(corner))) != \
                    _comparable(records[corner]):
                return None
            for r in group:
                if r not in records:
                    written[r] = _written(records[o], base_steps, at(r))
    except _Mismatch:
        return None
    # Values first (a rank receives what another, perhaps written too, sent).
    made = {d: list(values_of[d]) for d in records}
    for r, rec in sorted(written.items()):
        made[r] = [doc.value(r, C.Claim(tensor=t, box=box, part=part, combine=combine,
                                        torch_says=says, scale=scale), dtype, dims)
                   for t, box, part, combine, says, dtype, dims, scale in rec.values]
    out = list(lowerings)
    for r, rec in sorted(written.items()):
        own = made[r]
        for (op, kind, attrs, inputs, outputs, phase, layer), (seq, origin) in \
                zip(rec.tasks, rec.task_meta):
            doc.tasks.append(dict(id=len(doc.tasks), op=op, kind=kind, attrs=attrs, device=r,
                                  phase=phase, layer=layer, inputs=[own[i].id for i in inputs],
                                  outputs=[own[i].id for i in outputs], seq=seq))
            doc.origin_of_task.append(origin)
        log = [dict(key=key, group=tuple(group), kind=kind, attrs=attrs, input=own[i],
                    output=own[o], origin=origin, seq=seq)
               for (key, group, kind, attrs, i, o), (seq, origin) in
               zip(rec.collectives, rec.coll_meta)]
        for name, source, si, di in rec.receives:
            doc.p2p.append(dict(name=name, source=made[source][si], destination=own[di]))
        out.append(SimpleNamespace(
            device=r, collective_log=log, rank=ranks[r], trace=ranks[r].trace,
            results=[own[i] if i is not None else None for i in rec.outputs]))
    return sorted(out, key=lambda L: L.device)
