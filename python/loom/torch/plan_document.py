"""The plan being built: its values (each a piece of a spec tensor it claims), tasks,
collectives and what the lowering learnt on the way (scalings, failures), written as
Loom's plan JSON; and the claims an op's partition signature implies for the
outputs of a piece of it."""

import dataclasses
import json
from fractions import Fraction

import torch

from loom.torch import claims as C
from loom.torch.lowered_values import Value

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class PValue(Value):
    """A plan value: a buffer on one device, with its claim."""
    id: int = -1
    device: int = -1
    claim: object = None


class PlanDocument:
    def __init__(self, spec_index, mesh_names, mesh_sizes, model_name):
        self.S = spec_index
        self.mesh = list(zip(mesh_names, mesh_sizes))
        self.model = model_name
        self.values = []
        self.tasks = []
        self.collectives = []
        self.outputs = []
        self.origin_of_task = []
        self.failures = []  # found while building the plan (a folded value of no region)
        self.p2p = []       # what pipeline stages send each other: name, source, destination
        # Where a value's factor (its claim's scale) was applied: dicts of value (its
        # id), device, factor (a Fraction), what (words), origin; api.py names the
        # one to blame for a failure of class scaled.
        self.scalings = []
        self.produced = set()  # ids of the values a task or collective makes
        self.origin_of_collective = {}
        self.seq_of_collective = {}  # (collective id, device) -> when the device's lowering made it
        self._seq = 0
        self.order = []     # per device, its program (pipeline schedules), or []
        self.lowered = None  # the ranks lowered when the others were written from them

    def next_seq(self):
        """A counter over the tasks and collectives the lowerings make, in order."""
        self._seq += 1
        return self._seq

    def value(self, device, claim, dtype, dims):
        v = PValue(name=f"v{len(self.values)}", dtype=dtype, dims=tuple(dims),
                   id=len(self.values), device=device, claim=claim)
        self.values.append(v)
        return v

    def task(self, device, op, kind, attrs, inputs, outputs, phase, layer, origin):
        self.produced.update(v.id for v in outputs)
        self.tasks.append(dict(id=len(self.tasks), op=op, kind=kind, attrs=attrs, device=device,
                               phase=phase, layer=layer, inputs=[v.id for v in inputs],
                               outputs=[v.id for v in outputs], seq=self.next_seq()))
        self.origin_of_task.append(origin)

    def json(self):
        def attrs_json(attrs):
            out = {}
            for k, v in attrs.items():
                if isinstance(v, bool):
                    out[k] = {"int": int(v)}
                elif isinstance(v, int):
                    out[k] = {"int": v}
                elif isinstance(v, float):
                    out[k] = {"float": v}
                elif isinstance(v, str):
                    out[k] = {"string": v}
                else:
                    out[k] = {"ints": [int(x) for x in v]}
            return out

        values = []
        for v in self.values:
            c = v.claim
            item = {"id": v.id, "device": v.device, "tensor": c.tensor,
                    "box": [list(b) for b in c.box], "part": C.part_text(c.part),
                    "dtype": v.dtype}
            if c.combine != "sum" and c.part not in (C.FULL, C.EMPTY):
                item["combine"] = c.combine
            if c.scale != 1 and c.part != C.EMPTY:
                item["scale"] = C.scale_text(c.scale)
            values.append(item)
        tasks = []
        for t in self.tasks:
            tasks.append({"id": t["id"], "op": t["op"], "kind": t["kind"],
                          "attrs": attrs_json(t["attrs"]), "device": t["device"],
                          "phase": t["phase"], "layer": t["layer"], "inputs": t["inputs"],
                          "outputs": t["outputs"]})
        doc = {
            "format": "loom.plan", "version": 1, "model": self.model,
            "mesh": [{"name": n, "size": s} for n, s in self.mesh],
            "values": values, "tasks": tasks, "collectives": self.collectives,
            "outputs": self.outputs, "order": self.order,
        }
        return json.dumps(doc)


# ---------------------------------------------------------------------------------
# Claims the signature implies.


def _interval_part(begin, end, extent):
    return ((Fraction(begin, extent), Fraction(end, extent)),) if extent else C.FULL


def _members(inputs):
    """Per input, what verify/homogeneity.h's EvenShareFactors reads: n where it
    claims one of n equal members' shares of a sum (the first such input's part;
    another part: -1), 0 where it claims the complete value, -1 otherwise."""
    out, first = [], None
    for v in inputs:
        part = v.claim.part
        n = C.members_of(part) if v.claim.combine == "sum" else None
        if part == C.FULL:
            out.append(0)
        elif n is not None and (first is None or part == first):
            first = part
            out.append(n)
        else:
            out.append(-1)
    return out


def implied_claims(S, index, inputs, out_tensor_ids, out_dims=None, free_box=None):
    """The claims of the outputs of a piece of spec op `index` whose inputs hold
    `inputs` (PValues), by the op's partition signature: each output dim takes the
    interval its label has on the inputs (the whole dim for a label only outputs
    carry); a split reduction makes the outputs that share of the sum; a partial
    operand passes its share on."""
    op = S.g.ops[index]
    sig = S.signature(index)
    # A label covers the same fraction of every dim carrying it.
    fraction = {}
    for i, labels in enumerate(sig["inputs"]):
        box = inputs[i].claim.box
        dims = S.dims(op["inputs"][i])
        for d, label in enumerate(labels):
            if dims[d]:
                fraction.setdefault(label, (Fraction(box[d][0], dims[d]),
                                            Fraction(box[d][1], dims[d])))
    # Every split reduction dim refines the share (batch rows over data parallelism,
    # then sequence positions over tensor parallelism: a quarter of the sum).
    part, combine = C.FULL, "sum"
    for label, kind in sig["kinds"].items():
        if kind in ("reduction", "max_reduction", "logsumexp_reduction") and label in fraction:
            lo, hi = fraction[label]
            if (lo, hi) != (0, 1):
                part = C.refine(part, lo, hi)
                combine = {"max_reduction": "max",
                           "logsumexp_reduction": "logsumexp"}.get(kind, "sum")
    if part == C.FULL:
        for v in inputs:
            if v.claim.part not in (C.FULL, C.EMPTY):
                part, combine = v.claim.part, v.claim.combine
                break
    scale = S.scale_of(index, [v.claim.scale for v in inputs],
                       [v.claim.part == C.EMPTY for v in inputs], _members(inputs))
    out = []
    for k, labels in enumerate(sig["outputs"]):
        dims = S.dims(op["outputs"][k])
        box = []
        for d, label in enumerate(labels):
            if label not in fraction and out_dims is not None and out_dims[k][d] != dims[d]:
                # A label only outputs carry (an expanded dim), computed in part: where
                # in the dim the rank's positions lie (free_box).
                box.append(free_box(dims[d], out_dims[k][d]) if free_box else
                           (0, out_dims[k][d]))
                continue
            lo, hi = fraction.get(label, (Fraction(0), Fraction(1)))
            box.append((int(lo * dims[d]), int(hi * dims[d])))
        out.append(C.Claim(tensor=out_tensor_ids[k], box=tuple(box), part=part,
                           combine=combine, scale=scale))
    return out
