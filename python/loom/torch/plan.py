"""The plan: the per-rank programs torch.distributed runs, as a Loom plan over the
captured spec.

Each rank's traced program (distributed.RankTrace) is walked in order:

- its inputs are the spec's inputs (parameters by name, optimizer states, batch
  tensors), each claiming what DTensor (or, for the batch, the data layout) says
  the rank holds of it;
- an op of the model's code is matched to the op of the spec it is a piece of, by
  data flow: the op of the same ATen kind whose operands are the spec images of
  its own operands (the source line, then the order, tell apart ops that read the
  same operands); it is lowered with the same rules as the spec, and each Loom op
  it gives is a task computing a piece of the spec's Loom op in the same place;
- a redistribution DTensor ran (a Partial made Replicate, a Shard gathered, ...)
  becomes the collectives and local copies its placement change means, mesh dim by
  mesh dim, in torch's own order (torch's _gen_transform_infos); the members of a
  collective are the ranks that share every mesh coordinate but its dim's;
- every value claims what DTensor says its local tensor holds where DTensor says
  anything (the trace's Recorder), and what its op's partition signature implies
  otherwise; the verifier checks every claim against what the plan computes.

An op with no counterpart in the spec stops the plan (CaptureError naming the op,
the module and the source line): the rank does not run the model's computation.
"""

import collections
import dataclasses
import json
import operator
from fractions import Fraction

import torch

import loom
from loom.torch import accumulation
from loom.torch import claims as C
from loom.torch import gradient_sums
from loom.torch import norm_partial
from loom.torch import pipeline_plan
from loom.torch import plan_symmetry
from loom.torch.errors import CaptureError
from loom.torch.lower import (C10D_ALL_REDUCE, RULES, Lowering, MaskedIds, UnsupportedOp, Value,
                              VocabMask, _dims, user_frame)
from loom.torch.pipeline import microbatch_of, microbatch_of_action

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class PValue(Value):
    """A plan value: a buffer on one device, with its claim."""
    id: int = -1
    device: int = -1
    claim: object = None


# ---------------------------------------------------------------------------------
# The spec, indexed for matching.

# Non-tensor arguments that say which piece of an operand an op takes or which dims
# it works on, whatever the operand's size: ops reading the same operands are told
# apart by them.
_STRUCTURAL_ARGS = {
    aten.transpose.int: (1, 2), aten.permute.default: (1,), aten.sum.dim_IntList: (1, 2),
    aten.mean.dim: (1, 2), aten._softmax.default: (1,), aten._log_softmax.default: (1,),
    aten.cat.default: (1,), aten.unsqueeze.default: (1,), aten.squeeze.dim: (1,),
    aten.cumsum.default: (1,), aten.select.int: (1, 2), aten.scalar_tensor.default: (0,),
    aten.full.default: (1,), aten.full_like.default: (1,), aten.new_full.default: (2,),
    aten.pow.Tensor_Scalar: (1,),
}


_ALL_REDUCE = torch.ops._c10d_functional.all_reduce.default
_WAIT = torch.ops._c10d_functional.wait_tensor.default
_FUNCTIONAL_COLLECTIVES = {
    _ALL_REDUCE, _WAIT, torch.ops._c10d_functional.all_gather_into_tensor.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops._c10d_functional.all_to_all_single.default,
    torch.ops._c10d_functional.broadcast.default}

# One name for ATen ops that differ only in how torch lays out memory: a reshape is
# a view or a copy and an _unsafe_view depending on the operand's strides.
_CANONICAL_TARGET = {aten._unsafe_view.default: aten.view.default,
                     aten.reshape.default: aten.view.default}


ANY = object()  # an operand image that matches any (SpecIndex.match)
FOLDED = object()  # a folded operand, in SpecIndex.open_folded keys


@dataclasses.dataclass(eq=False)
class FoldedVar:
    """A rank's folded value not yet bound to the spec's (SpecIndex._match_open)."""
    node: object       # the rank's folded FX node
    piece: object      # its value
    preferred: dict    # region_of's preferred begins
    region: object = None
    bound: object = None  # the spec's folded node, once bound
    nodes: list = None    # the rank's nodes holding it (it and what re-labels it)


def _target(node):
    if node.op != "call_function":
        return "get_attr"
    return _CANONICAL_TARGET.get(node.target, node.target)


def is_identity(node):
    """An op that only copies or re-labels its operand: a clone, a detach, a view or
    a cast that keeps the shape and dtype (DTensor's from_local and to_local too)."""
    if node.op != "call_function":
        return False
    if node.target in (aten.alias.default, aten.detach.default, aten.clone.default,
                       aten.contiguous.default, aten.lift_fresh_copy.default):
        return True
    if node.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                       aten._to_copy.default):
        src = node.args[0]
        if not isinstance(src, torch.fx.Node):
            return False
        a, b = src.meta.get("val"), node.meta.get("val")
        return a is not None and b is not None and tuple(a.shape) == tuple(b.shape) and \
            a.dtype == b.dtype
    return False


def canonical(node):
    """`node`'s operand chain followed through identity ops (and, in the step on one
    device, through an in-place all-reduce, which is the identity there)."""
    while node is not None:
        if is_identity(node):
            node = node.args[0]
            continue
        source = _c10d_all_reduced(node)
        if source is None:
            return node
        node = source
    return node


def _c10d_all_reduced(node):
    """The tensor an in-place c10d all-reduce read, where `node` is its result
    (getitem(getitem(allreduce_(tensors, ...), 0), i)); else None."""
    if not (isinstance(node, torch.fx.Node) and node.target is operator.getitem):
        return None
    inner = node.args[0]
    if not (isinstance(inner, torch.fx.Node) and inner.target is operator.getitem and
            inner.args[1] == 0 and isinstance(inner.args[0], torch.fx.Node) and
            inner.args[0].target is C10D_ALL_REDUCE):
        return None
    tensors = inner.args[0].args[0]
    return tensors[node.args[1]] if isinstance(tensors, (list, tuple)) else None


def _ndim(node):
    val = node.meta.get("val")
    return val.dim() if isinstance(val, torch.Tensor) else None


def _site(node):
    f = user_frame(node.meta.get("stack_trace"))
    return (f[0], f[1]) if f else None


def _recomputed_alike(node, found):
    """Of the spec nodes `found`, those computed as `node` is: in a checkpointed
    module's recompute (in the module of the same name) or not. The step's recompute
    is its forward's value where the two were merged (dedupe.py); where something
    impure stands between them (a dropout), the step has its own recompute, which
    the backward reads."""
    custom = node.meta.get("custom") or {}
    recompute = bool(custom.get("recompute"))
    alike = [m for m in found if bool((m.meta.get("custom") or {}).get("recompute")) == recompute]
    if recompute:
        alike = [m for m in alike if (m.meta.get("custom") or {}).get("module") ==
                 custom.get("module")] or alike
    return alike or found


class AnotherModel(Exception):
    """The ranks' parameters are not pieces of the model's (RankLowering's
    _another_model): the plan is refuted before it is lowered; `doc.failures` says
    why."""

    def __init__(self, doc):
        super().__init__(doc.failures[-1]["message"])
        self.doc = doc


class SpecIndex:
    def __init__(self, spec):
        self.spec = spec
        self.L = spec.lowering
        self.graph = spec.trace.module.graph
        self.g = self.L.g
        self.tensor_id = {}
        for what, item in self.g._items:
            names = [item] if what == "input" else self.g.ops[item]["outputs"]
            for n in names:
                self.tensor_id[n] = len(self.tensor_id)
        self.placeholder = {}
        nodes = [n for n in self.graph.nodes if n.op == "placeholder"]
        for node, ph in zip(nodes, spec.trace.placeholders):
            self.placeholder[ph.name] = node
        self.origins = self.L.origins
        self.candidates = collections.defaultdict(list)
        self.folded = collections.defaultdict(list)  # (target, site) -> folded spec nodes
        # Candidates by their key with every folded operand (a shape-only value) left
        # open: a rank's folded value is bound to the spec's where an op reads it.
        self.open_folded = collections.defaultdict(list)
        for n in self.graph.nodes:
            if n in self.L.folded:
                self.folded[(_target(n), _site(n))].append(n)
            elif n.op in ("call_function", "get_attr") and n in self.L.node_ops and \
                    not is_identity(n):
                key = self.key(n, lambda a: a)
                self.candidates[key].append(n)
                folded = [self.folded_of(a) for a in _flat_nodes((n.args, n.kwargs))]
                if any(f is not None for f in folded):
                    open_key = (key[0], tuple(FOLDED if f is not None else a
                                              for a, f in zip(key[1], folded))) + key[2:]
                    self.open_folded[open_key].append((n, folded))
        self.used = set()
        self.signatures = {}
        # The step's gradient accumulation chains (accumulation.py): each term's
        # (chain's last link, position).
        self.chains = accumulation.Chains(self.graph)
        self.chain_term = {canonical(t): (last, p) for last, terms in self.chains.terms.items()
                           for p, t in enumerate(terms)}

    def folded_of(self, node):
        """The spec's folded value `node` is (or re-labels), or None."""
        while isinstance(node, torch.fx.Node):
            if node in self.L.folded:
                return node
            if not is_identity(node):
                return None
            node = node.args[0]
        return None

    def key(self, node, image):
        """(target, the spec images of its tensor operands)."""
        args = []
        for a in _flat_nodes((node.args, node.kwargs)):
            i = image(a)
            args.append(i if i is ANY or isinstance(i, FoldedVar) else canonical(i))
        target = _target(node)
        if node.target is _getitem():
            return (target, tuple(args), node.args[1])
        return (target, tuple(args))

    def match(self, node, image, again=False):
        """The spec node `node` (of a rank's program) is a piece of, or None. With
        `again`, a spec node already taken may be taken again when no other fits."""
        key = self.key(node, image)
        if any(k is None for k in key[1]):
            return None
        if any(isinstance(k, FoldedVar) for k in key[1]):
            return self._match_open(node, key, again)
        if any(k is ANY for k in key[1]):
            every = [m for k, ms in self.candidates.items()
                     if k[0] == key[0] and len(k[1]) == len(key[1]) and
                     all(a is ANY or a is b for a, b in zip(key[1], k[1])) for m in ms]
        else:
            every = list(self.candidates.get(key, ()))
        positions = _STRUCTURAL_ARGS.get(node.target, ())
        if positions:
            every = [m for m in every if all(_arg(m, i) == _arg(node, i) for i in positions)
                     and m.kwargs.get("dtype") == node.kwargs.get("dtype")] or every
        # Views of one operand to different shapes share a key: the spec's of the same
        # number of dims (a rank's shape is a piece of the spec's, not another shape).
        ndim = _ndim(node)
        every = [m for m in every if _ndim(m) == ndim] or every
        found = [m for m in every if m not in self.used]
        if not found and (again or len(set(every)) == 1):
            # The step computes it once (dedupe.py); the rank may compute it again (a
            # rotary table each of its layers unsqueezes).
            found = every
        if not found:
            return None
        found = _recomputed_alike(node, found)
        site = _site(node)
        same_site = [m for m in found if _site(m) == site]
        m = (same_site or found)[0]
        self.used.add(m)
        return m

    def _match_open(self, node, key, again):
        """A rank op reading folded values of its own (FoldedVar): the spec op on the
        same other operands whose folded operands hold the rank's values as a region
        (made by the same op; at the same line first). Binds each FoldedVar to the
        spec's folded value; None if no op fits."""
        from loom.torch import constants
        open_key = (key[0], tuple(FOLDED if isinstance(a, FoldedVar) else a
                                  for a in key[1])) + key[2:]
        entries = self.open_folded.get(open_key, ())
        # A spec node taken already fits again when it is the only one (dedupe.py).
        again = again or len({m for m, _ in entries}) == 1
        fits, exact = [], []
        for m, folded in entries:
            if m in self.used and not again:
                continue
            ok, same_site = True, True
            for var, spec_folded in zip(key[1], folded):
                if not isinstance(var, FoldedVar):
                    continue
                if spec_folded is None or _target(spec_folded) != _target(var.node):
                    ok = False
                    break
                same_site &= _site(spec_folded) == _site(var.node)
                var.region = constants.scaled_region(self.L.folded[spec_folded], var.piece,
                                                      var.preferred)
                ok &= var.region is not None
            if ok:
                (exact if same_site else fits).append((m, folded))
        chosen = (exact or fits or [None])[0]
        if chosen is None:
            return None
        m, folded = chosen
        for var, spec_folded in zip(key[1], folded):
            if isinstance(var, FoldedVar):
                var.bound = spec_folded
        self.used.add(m)
        return m

    def has_match(self, node, image):
        """Whether the step has an op `node` may be matched to as it is (an op of its
        target on its operands' images); True where the images leave it open."""
        key = self.key(node, image)
        if any(k is None or k is ANY or isinstance(k, FoldedVar) for k in key[1]):
            return True
        return bool(self.candidates.get(key))

    def match_but_one(self, node, image):
        """The one spec node with `node`'s target whose operands' images are
        `node`'s but for one operand (at one position or more), or None (none, or more
        than one). A spec node
        already taken is taken again only if no other fits (a shared parameter the
        rank updates twice)."""
        key = self.key(node, image)
        args = key[1]
        if any(a is None or isinstance(a, FoldedVar) for a in args):
            return None
        if len(args) == 1:
            return self._same_place(node, key)
        ranked = collections.defaultdict(list)
        for k, ms in self.candidates.items():
            if k[0] != key[0] or len(k[1]) != len(args) or k[2:] != key[2:]:
                continue
            pairs = [(a, b) for a, b in zip(args, k[1]) if a is not ANY and a is not b]
            differ = {a for a, _ in pairs}
            if len(differ) != 1 or len(differ) == len(set(args)):
                continue
            # The likelier counterpart: the parameters and inputs are the same (a wrong
            # value computed, not a wrong weight), and the spec reads there a value of
            # the same kind.
            same_inputs = all(a.op != "placeholder" for a, _ in pairs)
            alike = all(_target(a) == _target(b) and a.op == b.op for a, b in pairs)
            ranked[(not same_inputs, not alike)].extend(ms)
        if not ranked:
            return None
        fits = ranked[min(ranked)]
        fresh = [m for m in fits if m not in self.used]
        chosen = fresh[:1] if fresh else fits
        if len(set(chosen)) != 1:
            return None
        self.used.add(chosen[0])
        return chosen[0]

    def _same_place(self, node, key):
        """An op of one operand the spec computes on another value: the spec's op of the
        same kind, module, phase and source line (the first not taken), or None."""
        custom = node.meta.get("custom") or {}
        place = (custom.get("module"), custom.get("phase"), _site(node))
        if place[2] is None:
            return None
        positions = _STRUCTURAL_ARGS.get(node.target, ())
        fits = []
        for k, ms in self.candidates.items():
            if k[0] != key[0] or len(k[1]) != 1 or k[2:] != key[2:]:
                continue
            for m in ms:
                theirs = m.meta.get("custom") or {}
                if (theirs.get("module"), theirs.get("phase"), _site(m)) == place and \
                        all(_arg(m, i) == _arg(node, i) for i in positions):
                    fits.append(m)
        fresh = [m for m in fits if m not in self.used]
        if not fresh:
            return None
        self.used.add(fresh[0])
        return fresh[0]

    def match_folded(self, node):
        """The spec's folded shape-only value a rank's folded one stands for: the one
        made by the same op at the same line, in order."""
        every = self.folded.get((_target(node), _site(node)), ())
        found = [m for m in every if m not in self.used] or list(every)
        if not found:
            return None
        self.used.add(found[0])
        return found[0]

    def match_folded_by_value(self, node, piece, preferred):
        """Failing that (the rank's value made at another line: torch's own code where
        the spec runs Loom's decomposition), the first by the same op whose value
        holds the rank's as a region."""
        from loom.torch import constants
        target = _target(node)
        for (t, _), nodes in self.folded.items():
            if t != target:
                continue
            for m in nodes:
                if m not in self.used and \
                        constants.scaled_region(self.L.folded[m], piece, preferred) is not None:
                    self.used.add(m)
                    return m
        return None

    def scale_of(self, index, factors, zeros):
        """The factor a piece of spec op `index` holds when its operands hold
        `factors` (Fractions; `zeros`: operands holding zeros), by the op's
        homogeneity (verify/homogeneity.h, through the bindings); 1 where the op is
        not proportional to a scaled operand (the verifier says so there)."""
        op = self.g.ops[index]
        # A piece of a fill with 0 is zeros, whatever its factor.
        zeros = [z or self.zero_fill(n) for z, n in zip(zeros, op["inputs"])]
        if all(f == 1 or z for f, z in zip(factors, zeros)):
            return Fraction(1)
        types = [(list(self.g.types[n][1]), self.g.types[n][0]) for n in op["inputs"]]
        r = loom.scale_of_piece(op["kind"], types, op["attrs"],
                                [(f.numerator, f.denominator) for f in factors],
                                [bool(z) for z in zeros])
        if "factor" not in r:
            return Fraction(1)
        return Fraction(*r["factor"])

    def zero_fill(self, tensor_name):
        if not hasattr(self, "_zero_fills"):
            self._zero_fills = {n for op in self.g.ops if op["kind"] == "fill" and
                                float(op["attrs"].get("value", 1)) == 0.0 for n in op["outputs"]}
        return tensor_name in self._zero_fills

    def signature(self, index):
        sig = self.signatures.get(index)
        if sig is None:
            op = self.g.ops[index]
            types = [(list(self.g.types[n][1]), self.g.types[n][0]) for n in op["inputs"]]
            sig = loom.signature(op["kind"], types, op["attrs"])
            self.signatures[index] = sig
        return sig

    def dims(self, tensor_name):
        return self.g.types[tensor_name][1]


class _SpecOf:
    """A placement seen as a DTensor spec of one mesh dim (norm_partial.is_partial_norm)."""

    def __init__(self, placement):
        self.placements = (placement,)


class _C10dResult(list):
    """What a c10d collective returns (its tensors, its work), indexed by getitem."""


def _getitem():
    import operator
    return operator.getitem


def _flat_nodes(tree):
    out = []

    def walk(x):
        if isinstance(x, torch.fx.Node):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)
    walk(tree)
    return out


def _arg(node, i):
    if i < len(node.args):
        return node.args[i]
    return None


# ---------------------------------------------------------------------------------
# The plan being built.

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
        if kind in ("reduction", "max_reduction") and label in fraction:
            lo, hi = fraction[label]
            if (lo, hi) != (0, 1):
                part = C.refine(part, lo, hi)
                combine = "max" if kind == "max_reduction" else "sum"
    if part == C.FULL:
        for v in inputs:
            if v.claim.part not in (C.FULL, C.EMPTY):
                part, combine = v.claim.part, v.claim.combine
                break
    scale = S.scale_of(index, [v.claim.scale for v in inputs],
                       [v.claim.part == C.EMPTY for v in inputs])
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


def _reduce_of(partial):
    """Loom's reduce op of a Partial: sum, avg or max."""
    op = getattr(partial, "reduce_op", "sum")
    if op in ("sum", "avg", "max"):
        return op
    raise CaptureError(f"a reduction by {op} has no Loom collective")


def reduced_scale(claim, reduce, members):
    """The factor the result of a `reduce` over `members` values claiming `claim`
    holds: shares of a sum add to the value at their own factor, copies of a complete
    value to `members` times it; an average divides by the members."""
    scale = claim.scale
    if reduce == "max":
        return scale
    if claim.part == C.FULL:
        scale = scale * members
    if reduce == "avg":
        scale = scale / members
    return scale


# ---------------------------------------------------------------------------------
# One rank's program.

class RankLowering(Lowering):
    """Lowers a rank's matched ops with the spec's rules; each Loom op becomes a task
    paired with the spec op the same rule gave for the matched spec node."""

    def __init__(self, S, rank, doc, data_claim):
        self.S = S
        self.rank = rank
        self.doc = doc
        self.device = rank.rank
        self.trace = rank.trace
        self.data = rank.data  # a stand-in's own batch (constants.concrete_data)
        self.data_claim = data_claim
        self.origins = __import__("loom.torch.lower", fromlist=["Origins"]).Origins(
            rank.trace.module.graph, rank.trace.optimizer.get("site"))
        self.env = {}
        self.image = {}       # rank FX node -> spec FX node it is a piece of (or its source)
        self.current = None
        self.origin = None
        self.node_param = {}
        self.template = []
        self.cursor = 0
        self.spec_node = None
        self.dcursor = 0
        self.collective_log = []  # (key, mesh_dim, kind, attrs, in value, out value)
        self.constants = {}
        self.inputs = {}
        self.data_dims = ()   # mesh dims that split the batch (set by build_plan)
        self.mesh_sizes = ()  # the launch mesh (set by build_plan)
        self.batch_rows = None  # (batch size, first row, rows) of the rank's batch
        self.batch_rows_of = {}  # micro-batch -> the same, of a pipelined rank's micro-batch
        self.microbatch = None  # the micro-batch of the node being lowered
        self._counts = 0
        self._masked_sums = 0
        self._functionals = 0
        self.second_copy = set()  # rank nodes computed from a second copy of a shared parameter
        self.received = {}    # placeholder node -> name of what the rank receives there
        self.unbound = {}     # folded FX node -> FoldedVar, until an op reading it is matched
        self.unbound_origin = {}
        self.published = {}   # (device, name) -> (PValue, spec image) of what ranks send
        self._op_by_op = False  # lowering a sum gradient_sums.py held back, as it is
        self.split_pieces = {}  # rank split node -> the step's piece each of its pieces is
        self.completed_terms = set()  # rank gradients lowered as their share of a step's sum

    # ---- tasks -----------------------------------------------------------------------
    def emit_n(self, kind, inputs, attrs, outs, hint=None):
        if self.cursor >= len(self.template):
            self.unsupported(f"the rank lowers '{self.current.target}' to more ops than the "
                             "model's step does")
        index = self.template[self.cursor]
        op = self.S.g.ops[index]
        if op["kind"] != kind:
            self.unsupported(f"the rank lowers '{self.current.target}' to '{kind}' where the "
                             f"model's step has '{op['kind']}'")
        self.cursor += 1
        if kind == "split":
            pieces = self._split_of_a_piece(op, inputs[0], attrs)
            if pieces is not None:
                return pieces
        if len(outs) != len(op["outputs"]):
            self.unsupported(f"the rank's '{kind}' gives {len(outs)} values where the model's "
                             f"step's gives {len(op['outputs'])} (a loop over another number "
                             "of pieces, such as micro-batches of a fixed size)")
        tensors = [self.S.tensor_id[n] for n in op["outputs"]]
        if kind in ("fill", "expand"):
            whole = self._whole_broadcast(index, op, inputs, attrs, tensors, outs)
            if whole is not None:
                return whole
        implied = implied_claims(self.S, index, inputs, tensors, [d for _, d in outs],
                                 self.free_box)
        if kind == "scale" and attrs.get("factor") != op["attrs"].get("factor"):
            # The step's scale by another factor (a loss divided by the world size,
            # which is 1 on one device): the piece times their ratio.
            ratio = C.rational_of(attrs["factor"]) / C.rational_of(op["attrs"]["factor"])
            implied = [dataclasses.replace(c, scale=c.scale * ratio) for c in implied]
            scaled_by = (ratio, attrs["factor"], op["attrs"]["factor"])
        if kind == "pick_grad" and "vocab_begin" in attrs:
            # A vocabulary piece's gradient: its range is the piece's, which no input
            # of the op carries.
            begin = attrs["vocab_begin"]
            box = implied[0].box[:-1] + ((begin, begin + attrs["vocab"]),)
            implied[0] = dataclasses.replace(implied[0], box=box)
        for c, (_, dims) in zip(implied, outs):
            if tuple(e - b for b, e in c.box) != tuple(dims):
                self.unsupported(
                    f"the rank's {list(dims)} piece of '{kind}' is no box of the model's "
                    f"{list(self.S.dims(op['outputs'][0]))} tensor (a view merging a split "
                    "dim into a whole one)")
        outputs = [self.doc.value(self.device, c, dt, dims)
                   for c, (dt, dims) in zip(implied, outs)]
        if kind == "scale" and attrs.get("factor") != op["attrs"].get("factor"):
            ratio, got, want = scaled_by
            self.doc.scalings.append(dict(
                value=outputs[0].id, device=self.device, factor=ratio,
                what=f"a scaling by {got:g} where the model's step scales by {want:g}",
                origin=self.origin))
        self.doc.task(self.device, index, kind, attrs, inputs, outputs, op["phase"],
                      op["layer"], self.origin)
        return outputs

    def _split_of_a_piece(self, op, x, attrs):
        """A split of a value the rank holds only some positions of along the split
        dim (its rows of the batch cut into micro-batches): each of its pieces is a
        region of one of the step's pieces, not necessarily the one of the same
        index (on a data-parallel rank, micro-batch 0 of rows 4 to 7 is the step's
        micro-batch 2). Lowered as local slices of the rank's positions, each
        claiming the step's piece it lies in (the verifier moves a slice into the
        split output that holds it); the getitems that read them take the step's
        pieces (self.split_pieces). None where the rank holds every position."""
        d = attrs["dim"]
        whole = self.S.dims(op["inputs"][0])[d]
        begin, end = x.claim.box[d]
        if (begin, end) == (0, whole):
            return None
        theirs = list(op["attrs"]["sizes"])
        starts = [sum(theirs[:k]) for k in range(len(theirs))]
        pieces, where, at = [], [], begin
        for size in attrs["sizes"]:
            lo, hi = at, at + size
            at = hi
            inside = [k for k, s in enumerate(starts) if s <= lo and hi <= s + theirs[k]]
            pieces.append((inside[0] if inside else None, lo, hi))
            where.append(f"[{lo}:{hi}) " + (f"in the step's piece {inside[0]}" if inside
                                            else "across the step's pieces"))
        taken = [k for k, _, _ in pieces]
        if None in taken or len(set(taken)) != len(taken):
            self.unsupported(
                f"the rank splits positions [{begin}:{end}) of dim {d} (the model's step "
                f"splits all {whole}, into {theirs}) into {list(attrs['sizes'])}: its pieces "
                f"hold {', '.join(where)}; a loop over pieces that are not each a whole piece "
                "of the step's (micro-batches of another size) is not proved yet")
        outs = []
        for k, lo, hi in pieces:
            box = list(x.claim.box)
            box[d] = (lo - starts[k], hi - starts[k])
            dims = list(x.dims)
            dims[d] = hi - lo
            claim = dataclasses.replace(x.claim, tensor=self.S.tensor_id[op["outputs"][k]],
                                        box=tuple(box))
            out = self.doc.value(self.device, claim, x.dtype, tuple(dims))
            self.doc.task(self.device, -1, "slice", {"dim": d, "begin": lo - begin,
                                                     "end": hi - begin},
                          [x], [out], op["phase"], -1, self.origin)
            outs.append(out)
        self.split_pieces[self.current] = taken
        return outs

    # ---- the walk ----------------------------------------------------------------------
    def run(self):
        """Lowers the rank's program alone (a rank that receives nothing)."""
        steps = self.steps()
        try:
            while True:
                wanted = next(steps)
                raise CaptureError(f"rank {self.device} receives '{wanted}' from no rank")
        except StopIteration as done:
            return done.value

    def steps(self):
        """Lowers the rank's program, a generator: it yields the name of a value the
        rank receives (a pipeline stage's input or output gradient) when it needs it,
        and is sent back (PValue, spec image) once its sender has lowered it
        (build_plan). It returns the plan values of the trace's outputs."""
        graph = self.trace.module.graph
        output_node = graph.output_node()
        live = self._live(graph, output_node)
        self.folded, live = self.fold_constants(graph, live)
        rec = self.rank.recorder
        redistributions = {r.output_node: r for r in rec.redistributions if r.nodes}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, ph in zip(placeholders, self.trace.placeholders):
            if ph.kind == "recv":
                self.received[node] = ph.name
                continue
            self._placeholder(node, ph)
        sends = {n: name for n, (kind, name) in zip(output_node.args[0], self.trace.outputs)
                 if kind == "send"}
        self._name_outputs(output_node)  # the parameter each update belongs to
        self.chains = accumulation.Chains(graph)
        for node in graph.nodes:
            if node.op in ("placeholder", "output") or node not in live:
                continue
            for a in node.all_input_nodes:
                if a in self.received and a not in self.env:
                    value, image = yield self.received[a]
                    self._receive(a, value, image)
            self._lower_node(node, rec, redistributions)
            if node in sends:
                self.published[(self.device, sends[node])] = (self.env[node], self.image.get(node))
        outs = []
        for n, (kind, name) in zip(output_node.args[0], self.trace.outputs):
            outs.append(self.env.get(n) if isinstance(n, torch.fx.Node) else None)
        return outs

    def _lower_node(self, node, rec, redistributions):
        self.current = node
        self.origin = self.origins.of(node, self.node_param.get(node))
        # Each micro-batch's ops are pieces of the step's ops: matched anew.
        action = self.origin.get("action")
        self.microbatch = microbatch_of_action(action)
        # A weight backward recomputes what the input backward computed before it; a
        # checkpointed module's recompute what its forward computed.
        recompute = (node.meta.get("custom") or {}).get("recompute")
        self.S.used = self.used.setdefault((self.microbatch, (action or "")[:1] == "W",
                                            recompute), set())
        if node in self.chains.inner:
            return  # lowered with the chain's last link
        if node in self.chains.terms:
            self.env[node] = accumulation.lower_rank_chain(self, node, self.chains.terms[node],
                                                           canonical)
            return
        custom = node.meta.get("custom") or {}
        after_backward = custom.get("own_site") or custom.get("phase") == "optimizer"
        for a in node.all_input_nodes if after_backward and not is_identity(node) else ():
            if a not in self.completed_terms and isinstance(self.env.get(a), PValue) and \
                    accumulation.completes_a_term(self, a, canonical):
                # The rank's only term of a gradient the step accumulates: its share.
                self.completed_terms.add(a)
                self.env[a] = accumulation.lower_rank_chain(self, a, [a], canonical)
        if (node.meta.get("custom") or {}).get("accumulate") and \
                node.target in (aten.add.Tensor, aten.add_.Tensor):
            self._accumulate(node)
            return
        if self.second_copy and any(a in self.second_copy for a in node.all_input_nodes):
            self.second_copy.add(node)
        if node in self.folded:
            self._folded_value(node)
            return
        if not self._goes_to_model_op(node, rec):
            self._bind_operands(node)
        if node.name in rec.glue:
            r = redistributions.get(node.name)
            if r is not None:
                self._redistribute(node, r)
            elif node.name in rec.mask_windows:
                self._mask_window(node, rec.mask_windows[node.name])
            elif node.name in rec.aliases:
                self._alias(node, rec.aliases[node.name])
            return
        if node.op == "call_function" and node.target in _FUNCTIONAL_COLLECTIVES:
            self._functional_collective(node)
            return
        if node.op == "get_attr" and isinstance(getattr(self.trace.module, node.target, None),
                                                torch.ScriptObject):
            self.env[node] = getattr(self.trace.module, node.target)  # a c10d op's group
            return
        if node.op == "call_function" and node.target is C10D_ALL_REDUCE:
            self._c10d_all_reduce(node)
            return
        if node.op == "call_function" and node.target is _getitem() and \
                isinstance(self.env.get(node.args[0]), _C10dResult):
            self.env[node] = self.env[node.args[0]][node.args[1]]
            self.image[node] = self.image.get(node.args[0])
            return
        if any(isinstance(self.env.get(a), VocabMask) for a in node.all_input_nodes) and \
                node.target not in (aten.index_put_.default, aten.index_put.default):
            self._vocab_mask_op(node)
            return
        self._model_op(node)

    def _explain_scale(self, node, m):
        """A rank op matched to the spec's `m` on one other operand: where the spec
        reads that operand divided or multiplied by a constant (a gradient averaged
        over micro-batches) and the rank the undivided value, the plan is scaled: a
        failure of class scaled, at this op."""
        ours = self.S.key(node, self._spec_image)[1]
        theirs = self.S.key(m, lambda a: a)[1]
        for x, y in zip(ours, theirs):
            if x is y or not isinstance(y, torch.fx.Node) or y.op != "call_function":
                continue
            if y.target not in (aten.div.Tensor, aten.mul.Tensor) or len(y.args) < 2 or \
                    not isinstance(y.args[1], (int, float)) or canonical(y.args[0]) is not x:
                continue
            c = float(y.args[1])
            factor = c if y.target is aten.div.Tensor else 1.0 / c
            name = self.S.L.env[y].name if y in self.S.L.env else y.name
            self.doc.failures.append(dict(
                cls="scaled", tensor=name, devices=[self.device],
                message=(f"the rank reads '{x.name}' where the model's step reads it "
                         f"{'divided' if y.target is aten.div.Tensor else 'multiplied'} by "
                         f"{c:g}: scaled by {factor:g}"),
                origin=self.origin))

    def _extra_scale(self, node):
        """A division or multiplication by a number the model's step does not make
        (a gradient divided by the world size, a loss divided by the micro-batches):
        the value times that factor, a local `scale` with no op of the step, whose
        output claims the factor (docs/formats.md). The verifier carries it on."""
        if node.target not in (aten.div.Tensor, aten.mul.Tensor, aten.div_.Tensor,
                               aten.mul_.Tensor) or len(node.args) < 2 or \
                not isinstance(node.args[1], (int, float)) or isinstance(node.args[1], bool) or \
                not isinstance(node.args[0], torch.fx.Node) or node.args[0] not in self.env:
            return False
        source = node.args[0]
        image = self.image.get(source)
        v = self.env[source]
        if image is None or not isinstance(v, PValue) or node.args[1] == 0:
            return False
        c = C.rational_of(node.args[1])
        factor = C.rational_of(float(1 / c)) if node.target in (aten.div.Tensor, aten.div_.Tensor) \
            else c
        out = self.doc.value(self.device, dataclasses.replace(v.claim, scale=v.claim.scale * factor),
                             v.dtype, v.dims)
        self.doc.task(self.device, -1, "scale", {"factor": float(factor)}, [v], [out],
                      self.origin.get("phase", "forward"), -1, self.origin)
        self.env[node] = out
        self.image[node] = image
        self.doc.scalings.append(dict(value=out.id, device=self.device, factor=factor,
                                      what=f"the program's own scaling by {factor}",
                                      origin=self.origin))
        return True

    def _goes_to_model_op(self, node, rec):
        return node.name not in rec.glue and not (
            node.op == "call_function" and node.target in _FUNCTIONAL_COLLECTIVES) and \
            not any(isinstance(self.env.get(a), VocabMask) for a in node.all_input_nodes)

    def _receive(self, node, sent, image):
        """What the rank receives (a placeholder of its trace): a copy of the value its
        sender sent, claiming the same piece, joined to it by a send_recv."""
        value = self.doc.value(self.device, sent.claim, sent.dtype, sent.dims)
        self.env[node] = value
        self.image[node] = image
        self.doc.p2p.append(dict(name=self.received[node], source=sent, destination=value))

    def _placeholder(self, node, ph):
        split = microbatch_of(ph.name) if ph.kind == "input" else None
        if split is not None and split[0] in self.S.placeholder:
            return self._microbatch_input(node, ph, *split)
        spec_node = self.S.placeholder.get(ph.name)
        aliases = self.S.spec.trace.param_aliases or {}
        if spec_node is None and ph.fqn in aliases:
            # A parameter the model's step shares between two modules (tied
            # embeddings) that the rank holds twice: both copies are pieces of it.
            spec_node = self.S.placeholder.get(aliases[ph.fqn] + ph.name[len(ph.fqn):])
            self.second_copy.add(node)
        if spec_node is None:
            raise CaptureError(f"rank {self.device}: input '{ph.name}' is not an input of the "
                               "model's step")
        sval = self.S.L.input_value[spec_node]
        tensor = self.S.tensor_id[sval.name]
        val = node.meta["val"]
        dims = _dims(val)
        if ph.kind != "input":
            whole = dims
            if ph.dtensor is not None:
                whole = tuple(ph.dtensor.shape) + tuple(dims[len(val.shape):])
            if whole != tuple(sval.dims):
                self._another_model(ph, whole, sval)
        if ph.dtensor is not None:
            claim = C.from_dtensor_spec(ph.dtensor, tensor, self.device)
        elif ph.kind == "input":
            claim = self.data_claim(ph, tensor, sval.dims, dims, self.rank)
            if sval.dims and self.batch_rows is None:
                begin, end = claim.box[0]
                self.batch_rows = (sval.dims[0], begin, end - begin)
        else:
            claim = C.full_claim(tensor, sval.dims)
        self.env[node] = self.doc.value(self.device, claim, sval.dtype, dims)
        self.image[node] = spec_node

    def _another_model(self, ph, whole, sval):
        """A parameter (buffer, optimizer state) the rank holds as a piece of a tensor
        of another shape than the model's (a vocabulary padded to a multiple of the
        tensor-parallel degree, a resized embedding): the ranks train another model.
        Refuted here; nothing the rank computes from it is a piece of the step's."""
        self.doc.failures.append(dict(
            cls="computation_differs", tensor=sval.name, devices=[self.device],
            message=(f"rank {self.device} holds '{ph.name}' as a piece of a {list(whole)} "
                     f"tensor where the model's is {list(sval.dims)}: the ranks train "
                     "another model (a resized or padded parameter)"),
            origin={"module": ph.fqn.rpartition(".")[0], "phase": "parameter"}))
        raise AnotherModel(self.doc)

    def _microbatch_input(self, node, ph, base, m):
        """Micro-batch m of a pipelined rank's batch input: its rows of the rank's rows
        of the step's input (the rank's rows split into the schedule's micro-batches,
        as torch.tensor_split does)."""
        spec_node = self.S.placeholder[base]
        sval = self.S.L.input_value[spec_node]
        tensor = self.S.tensor_id[sval.name]
        dims = tuple(int(d) for d in node.meta["val"].shape)
        claim = self.data_claim(ph, tensor, sval.dims, dims, self.rank)
        if sval.dims:
            begin, end = claim.box[0]
            count = self.rank.pipeline.microbatches
            lo, hi = C.chunk(end - begin, count, m)
            claim = dataclasses.replace(claim, box=((begin + lo, begin + hi),) + claim.box[1:])
            self.batch_rows_of.setdefault(m, (sval.dims[0], begin + lo, hi - lo))
        self.env[node] = self.doc.value(self.device, claim, sval.dtype, dims)
        self.image[node] = spec_node

    def _folded_value(self, node):
        """A rank's folded shape-only value: bound to the spec's when an op reads it
        (SpecIndex._match_open), a plan input claiming the region of the spec's value
        it equals (constants.py)."""
        rows_of = self.batch_rows_of.get(self.microbatch) or self.batch_rows
        preferred = {0: rows_of[1]} if rows_of else None
        self.unbound[node] = FoldedVar(node, self.folded[node], preferred, nodes=[node])
        self.unbound_origin[node] = self.origin

    def _bind_folded(self, node, m):
        """The rank's folded value `node` (and what re-labels it) as the region of the
        spec's folded `m` it equals; none is a failure here."""
        var = self.unbound[node]
        first = var.nodes[0]
        origin, self.origin = self.origin, self.unbound_origin.get(first, self.origin)
        try:
            self._folded_as(first, m, var.piece, var.preferred)
        finally:
            self.origin = origin
        for n in var.nodes:
            self.unbound.pop(n, None)
            self.env[n] = self.env[first]
            self.image[n] = m

    def _folded_as(self, node, m, piece, preferred):
        from loom.torch import constants
        sval = self.S.L.env[m]
        tensor = self.S.tensor_id[sval.name]
        whole = self.S.L.folded[m]
        found = constants.scaled_region(whole, piece, preferred)
        scale = Fraction(1)
        if found is None:
            self.doc.failures.append(dict(
                cls="wrong_shard", tensor=sval.name, devices=[self.device],
                message=(f"rank {self.device} computes {list(piece.shape)} values from "
                         f"shapes that are no region of the model's {list(whole.shape)}"),
                origin=self.origin))
            box = tuple((0, d) for d in piece.shape)
        else:
            box, scale = found
        claim = C.Claim(tensor=tensor, box=box, part=C.FULL, scale=scale)
        self.env[node] = self.doc.value(self.device, claim, sval.dtype, tuple(piece.shape))
        if scale != 1:
            mine, theirs = piece.reshape(()).item(), whole.reshape(()).item()
            self.doc.scalings.append(dict(
                value=self.env[node].id, device=self.device, factor=scale,
                what=f"a value of the rank's batch ({mine:g}, a token count) where the "
                     f"model's step has the whole batch's ({theirs:g})",
                origin=self.origin))
        self.image[node] = m

    def _spec_image(self, a):
        if isinstance(self.env.get(a), VocabMask):
            return ANY  # the update loss parallel writes, where the spec writes a -1
        if a in self.unbound:
            return self.unbound[a]
        return self.image.get(a)

    def _bind_operands(self, node):
        """Binds the folded values `node` reads (FoldedVars its match bound)."""
        for a in node.all_input_nodes:
            var = self.unbound.get(a)
            if var is not None and var.bound is not None:
                self._bind_folded(a, var.bound)
            elif var is not None:
                # Matched otherwise (no spec op reads it alike): the first spec value
                # made by the same op, at the same line first.
                piece, preferred = var.piece, var.preferred
                m = self.S.match_folded(a) or self.S.match_folded_by_value(a, piece, preferred)
                if m is None:
                    origin, self.origin = self.origin, self.unbound_origin.get(a, self.origin)
                    self.unsupported(f"the rank computes a value from shapes ('{a.target}') "
                                     "the model's step does not")
                self._bind_folded(a, m)

    def _whole_broadcast(self, index, op, inputs, attrs, tensors, outs):
        """A fill or an expand a rank computes in part along the dim it makes (a batch
        of rows it has only some of): Loom's pieces compute such a dim whole, so the
        task computes all of it and a slice keeps the rank's rows. Every position
        along that dim holds the same values, so this is what the rank computes.
        None when the rank computes the whole dim."""
        dtype, dims = outs[0]
        full = self.S.dims(op["outputs"][0])
        if tuple(dims) == tuple(full):
            return None
        if op["kind"] == "fill":
            made = [d for d in range(len(full))]
        else:
            made = [op["attrs"]["dim"]]
        partial = [d for d in range(len(full)) if dims[d] != full[d]]
        if any(d not in made for d in partial):
            return None
        whole_attrs = dict(attrs)
        if op["kind"] == "fill":
            whole_attrs["shape"] = list(full)
            whole_dims = tuple(full)
        else:
            whole_attrs["size"] = op["attrs"]["size"]
            whole_dims = tuple(full[d] if d in made else dims[d] for d in range(len(full)))
        claims = implied_claims(self.S, index, inputs, tensors, [whole_dims], None)
        v = self.doc.value(self.device, claims[0], dtype, whole_dims)
        self.doc.task(self.device, index, op["kind"], whole_attrs, inputs, [v], op["phase"],
                      op["layer"], self.origin)
        for d in partial:
            lo, hi = self.free_box(full[d], dims[d])
            box = list(v.claim.box)
            box[d] = (box[d][0] + lo, box[d][0] + hi)
            piece_dims = list(v.dims)
            piece_dims[d] = hi - lo
            out = self.doc.value(self.device, dataclasses.replace(v.claim, box=tuple(box)),
                                 dtype, tuple(piece_dims))
            self.doc.task(self.device, -1, "slice", {"dim": d, "begin": lo, "end": hi}, [v],
                          [out], op["phase"], -1, self.origin)
            v = out
        return [v]

    def free_box(self, extent, size):
        """Where a rank's `size` positions of a dim of `extent` lie when nothing but
        the rank's own shape says: broadcast over the batch (an expand to the batch
        size), they are the rank's rows of the batch; otherwise the first ones."""
        rows_of = self.batch_rows_of.get(self.microbatch) or self.batch_rows
        if rows_of is not None:
            total, begin, rows = rows_of
            # The same fraction of the dim as of the batch (the batch, or the batch
            # flattened with other dims): the rank's rows' positions there.
            if extent * rows == size * total and (extent * begin) % total == 0:
                first = extent * begin // total
                return (first, first + size)
        return (0, size)

    def decide(self, condition):
        """The choice the spec's lowering of the matched op made (Lowering.decide)."""
        made = self.S.L.decisions.get(self.spec_node, [])
        if self.dcursor >= len(made):
            self.unsupported(f"the rank's '{self.current.target}' lowers differently from the "
                             "model's step")
        choice = made[self.dcursor]
        self.dcursor += 1
        return choice

    def _alias(self, node, source_name):
        """`node` re-labels the value of `source_name` (DTensor's from_local/to_local):
        the same plan value, claiming what DTensor now says it holds."""
        src = self._find(source_name)
        while src not in self.env and src.name in self.rank.recorder.aliases:
            src = self._find(self.rank.recorder.aliases[src.name])
        self.env[node] = self.env[src]
        self.image[node] = self.image.get(src)
        spec = self.rank.recorder.specs.get(node.name)
        if spec is not None and isinstance(self.env[node], PValue):
            self.env[node] = self._claimed(self.env[node], spec)

    def _model_op(self, node):
        if is_identity(node) and node.args[0] in self.unbound:
            # A re-labelled folded value: the same value, bound with it.
            var = self.unbound[node.args[0]]
            var.nodes.append(node)
            self.unbound[node] = var
            return
        if is_identity(node):  # the spec's identities are no candidates either
            self._alias(node, node.args[0].name)
            return
        if node.target is _getitem() and node.args[0] in self.split_pieces:
            self._piece_of_split(node)
            return
        if not self._op_by_op and gradient_sums.is_gradient_add(node) and \
                gradient_sums.lower(self, node, canonical):
            return
        # What a second copy of a shared parameter computes is the spec's computation
        # of it a second time.
        again = node in self.second_copy
        m = self._same_constant(node) if node.op == "get_attr" else None
        if m is None:
            m = self.S.match(node, self._spec_image, again)
        if m is None:
            # The spec's op on the same operands but one: the rank computes it on
            # another value (a gradient lacking a contribution, a stage sending the
            # wrong tensor); lowered as it is, the verifier says where it differs.
            m = self.S.match_but_one(node, self._spec_image)
            if m is not None and _ndim(m) != _ndim(node):
                m = None  # no piece of it: an op of another rank (the same line)
            if m is not None:
                self._explain_scale(node, m)
        if m is None and self._extra_scale(node):
            return
        if m is None:
            self.unsupported(f"the rank runs '{node.target}' where the model's step has no "
                             "such op on the same operands")
        self._bind_operands(node)
        self.image[node] = m
        self.spec_node = m
        self.template = self.S.L.node_ops.get(m, [])
        self.cursor = 0
        self.dcursor = 0
        if norm_partial.is_partial_norm(self.rank.recorder.specs.get(node.name)):
            # The norm of the rank's shard, which DTensor completes later (norm_partial.py).
            if node.target is aten.linalg_vector_norm.default:
                self.env[node] = norm_partial.lower_norm(self, node, m)
                return
            if node.target is aten.stack.default:
                self.env[node] = norm_partial.stack(self, node, m,
                                                    [self.env[a] for a in node.args[0]])
                return
        if any(isinstance(self.env.get(a), (norm_partial.PartialNorm,
                                             norm_partial.StackedNorms))
               for a in node.all_input_nodes):
            self.unsupported(f"'{node.target}' reads the norm of a shard before the ranks' "
                             "norms are combined")
        if node.op == "get_attr":
            result = self._constant(node)
        else:
            result = self._lower(node)
        if self.cursor != len(self.template):
            self.unsupported(f"the rank lowers '{node.target}' to fewer ops than the model's "
                             "step does")
        # What DTensor says the local tensor holds is the value's claim.
        spec = self.rank.recorder.specs.get(node.name)
        if spec is not None and isinstance(result, PValue):
            result = self._claimed(result, spec)
        self.env[node] = result

    def _same_constant(self, node):
        """The step's scalar constant of the same dtype and value as the rank's
        `node` (the step holds one node per value: dedupe.py), or None."""
        from loom.torch.dedupe import _scalar_constant
        mine = _scalar_constant(self.trace.module, node)
        if mine is None:
            return None
        module = self.S.spec.trace.module
        for m in self.S.candidates.get(("get_attr", ()), ()):
            if _scalar_constant(module, m) == mine:
                self.S.used.add(m)
                return m
        return None

    def _piece_of_split(self, node):
        """A getitem of a split of the rank's positions (_split_of_a_piece): the
        step's getitem of the piece it is."""
        source, j = node.args
        k = self.split_pieces[source][j]
        split = self.image.get(source)
        m = next((u for u in (split.users if split is not None else ())
                  if u.target is _getitem() and u.args[1] == k), None)
        if m is None:
            self.unsupported(f"the model's step never reads piece {k} of its split")
        self.S.used.add(m)
        self.image[node] = m
        self.env[node] = self.env[source][j]

    def lower_op(self, node):
        """Lowers `node` (a model op) as it is, op by op (gradient_sums.py)."""
        saved = self.current, self.origin
        self.current = node
        self.origin = self.origins.of(node, self.node_param.get(node))
        self._op_by_op = True
        try:
            self._model_op(node)
        finally:
            self._op_by_op = False
            self.current, self.origin = saved

    def _claimed(self, v, spec):
        """`v` claiming what DTensor says it holds. A DTensor of a sub-mesh (tensor
        parallelism inside data parallelism) speaks of the tensor its own mesh sees:
        the rank's batch rows of an activation, its share of a gradient summed over
        the batch. Along the dims it splits, and for the share of a sum over its own
        mesh, it says what the value holds; the rest comes from the data flow (the
        claim the value's op implies)."""
        full = self.S.dims(self._tensor_name(v.claim.tensor))
        dt_shape = tuple(int(d) for d in spec.shape)
        if len(dt_shape) != len(full) or any(d > f for d, f in zip(dt_shape, full)):
            # DTensor speaks of a tensor larger than the model's: the program labels
            # the value as something it is not (a whole tensor as a piece of one
            # twice its size). Refuted; the value keeps what its data flow says.
            self.doc.failures.append(dict(
                cls="wrong_claim", tensor=self._tensor_name(v.claim.tensor),
                devices=[self.device],
                message=(f"DTensor says rank {self.device}'s value is a piece of a "
                         f"{list(dt_shape)} tensor {list(spec.placements)} where the "
                         f"model's is {list(full)}"),
                origin=self.origin))
            return v
        claim = C.from_dtensor_spec(spec, v.claim.tensor, self.device)
        # The factor the value holds is the data flow's: DTensor speaks of pieces.
        claim = dataclasses.replace(claim, scale=v.claim.scale)
        if v.id not in self.doc.produced and (claim.part, claim.box) != \
                (v.claim.part, v.claim.box):
            # A plan input keeps what it is loaded as; the value DTensor says otherwise
            # of (a replicated bias made one rank's share of a sum) is a copy of it.
            copy = self.doc.value(self.device, v.claim, v.dtype, v.dims)
            phase = self.origin.get("phase", "forward") if self.origin else "forward"
            if v.dims:  # a slice of all of dim 0: a copy of any dtype
                self.doc.task(self.device, -1, "slice",
                              {"dim": 0, "begin": 0, "end": v.dims[0]}, [v], [copy], phase, -1,
                              self.origin)
                v = copy
            elif v.dtype in ("f64", "f32", "bf16", "f16"):
                self.doc.task(self.device, -1, "scale", {"factor": 1.0}, [v], [copy], phase,
                              -1, self.origin)
                v = copy
        if self._covers_launch_mesh(spec.mesh) and dt_shape == tuple(full):
            self.doc.values[v.id] = dataclasses.replace(v, claim=claim)
            return self.doc.values[v.id]
        implied = v.claim
        box = []
        for d, (b, e) in enumerate(claim.box):
            if (b, e) == (0, dt_shape[d]):
                box.append(tuple(implied.box[d]))
                continue
            offset = 0
            if dt_shape[d] != full[d]:
                offset = self.free_box(full[d], dt_shape[d])[0]
            box.append((offset + b, offset + e))
        # The share of a sum: DTensor's, of a sum over its own mesh, where the data
        # flow says the value is whole; the data flow's where it says more (a
        # gradient summed over sequence positions here and batch rows on the
        # other data-parallel ranks is a share of both sums).
        part, combine = implied.part, implied.combine
        if claim.part != C.FULL and implied.part in (C.FULL, C.EMPTY):
            part, combine = claim.part, claim.combine
        merged = C.Claim(tensor=claim.tensor, box=tuple(box), part=part, combine=combine,
                         torch_says=True, scale=v.claim.scale)
        self.doc.values[v.id] = dataclasses.replace(v, claim=merged)
        return self.doc.values[v.id]

    def _covers_launch_mesh(self, mesh):
        table = getattr(mesh, "_loom_ranks", None)
        size = table.numel() if table is not None else mesh.size()
        total = 1
        for n in self.mesh_sizes:
            total *= n
        return size == total

    def _constant(self, node):
        t = getattr(self.trace.module, node.target)
        from loom.torch.lower import _dtype, _scalar_value
        dtype = _dtype(t, self.origin)
        if t.dim() != 0:
            self.unsupported("a tensor constant in a rank's program")
        return self.fill(_scalar_value(t), dtype, ())

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
        if isinstance(v, (norm_partial.PartialNorm, norm_partial.StackedNorms)):
            self.env[node] = self._complete_norm(node, r, v, infos)
            return
        for step, info in enumerate(infos):
            a, b = info.src_dst_placements
            mesh_dim = info.mesh_dim
            n = r.source.mesh.size(mesh_dim)
            key = (r.index, step)
            group = _group_in(r.source.mesh, mesh_dim, self.device)
            if isinstance(a, Partial) and isinstance(b, Replicate):
                reduce = _reduce_of(a)
                v = self._collective(key, group, "all_reduce", {"reduce": reduce}, v,
                                     dataclasses.replace(v.claim, part=C.FULL,
                                                         scale=reduced_scale(v.claim, reduce, n)),
                                     v.dims)
            elif isinstance(a, Partial) and isinstance(b, Shard):
                d = b.dim
                box = list(v.claim.box)
                begin, end = box[d]
                lo, hi = C.chunk(end - begin, n, coord[mesh_dim])
                box[d] = (begin + lo, begin + hi)
                dims = list(v.dims)
                dims[d] = hi - lo
                reduce = _reduce_of(a)
                v = self._collective(key, group, "reduce_scatter",
                                     {"reduce": reduce, "dim": d}, v,
                                     dataclasses.replace(v.claim, part=C.FULL, box=tuple(box),
                                                         scale=reduced_scale(v.claim, reduce, n)),
                                     dims)
            elif isinstance(a, Shard) and isinstance(b, Replicate):
                d = a.dim
                full = self.S.g.types[self._tensor_name(v.claim.tensor)][1]
                box = list(v.claim.box)
                box[d] = (0, full[d])
                dims = list(v.dims)
                dims[d] = full[d]
                v = self._collective(key, group, "all_gather", {"dim": d}, v,
                                     dataclasses.replace(v.claim, box=tuple(box)), dims)
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

        def reduce_squares(squares):
            v = squares
            for step, mesh_dim in steps:
                group = _group_in(r.source.mesh, mesh_dim, self.device)
                key = (r.index, step, next(count))
                v = self._collective(key, group, "all_reduce", {"reduce": "sum"}, v,
                                     dataclasses.replace(v.claim, part=C.FULL,
                                                         scale=reduced_scale(v.claim, "sum",
                                                                             len(group))),
                                     v.dims)
            return v
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
                                          dataclasses.replace(v.claim, part=C.FULL), v.dims)

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
        key = ("functional", self._functionals)
        self._functionals += 1
        claim = dataclasses.replace(v.claim, part=C.FULL, combine="sum",
                                    scale=reduced_scale(v.claim, reduce, len(ranks)))
        self.env[node] = self._collective(key, tuple(ranks), "all_reduce", {"reduce": reduce},
                                          v, claim, v.dims)
        self.image[node] = self.image.get(src)

    def _accumulate(self, node):
        """A pipelined rank's gradient summed over its micro-batches (pipeline.py marks
        the sums): each micro-batch's gradient is a partial sum of the step's over the
        batch, their sum a local accumulation of those (its share is made whole once
        the collectives are assembled: repair_sum_parts)."""
        a, b = (self.env[x] for x in node.args[:2])
        claim = dataclasses.replace(a.claim, part=_union([a.claim.part, b.claim.part]))
        out = self.doc.value(self.device, claim, a.dtype, a.dims)
        self.doc.task(self.device, -1, "accumulate", {}, [a, b], [out],
                      self.origin.get("phase", "backward"), -1, self.origin)
        self.env[node] = out
        self.image[node] = self.image.get(node.args[0])

    def _c10d_all_reduce(self, node):
        """An in-place all-reduce the rank's code calls itself (`dist.all_reduce(t)`,
        in a training step or a gradient hook): each tensor's result is the same piece
        of the same tensor, combined over the process group as its reduce op says."""
        from loom.torch.lower import c10d_group_name, c10d_reduce_name
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
            key = ("c10d", self._functionals)
            self._functionals += 1
            claim = dataclasses.replace(v.claim, part=C.FULL, combine="sum",
                                        scale=reduced_scale(v.claim, reduce, len(ranks)))
            outs.append(self._collective(key, tuple(ranks), "all_reduce", {"reduce": reduce},
                                         v, claim, v.dims))
        self.env[node] = _C10dResult([_C10dResult(outs), None])
        self.image[node] = self.image.get(tensors[0]) if tensors else None

    def _find(self, name):
        if not hasattr(self, "_by_name"):
            self._by_name = {n.name: n for n in self.trace.module.graph.nodes}
        n = self._by_name.get(name)
        if n is None:
            raise CaptureError(f"rank {self.device}: node {name} not found")
        return n

    def _tensor_name(self, tensor_id):
        if not hasattr(self, "_names_by_id"):
            self._names_by_id = {i: n for n, i in self.S.tensor_id.items()}
        return self._names_by_id[tensor_id]

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


def build_plan(spec, ranks, mesh_names, mesh_sizes, data_claim, model_name, data_dims=()):
    """The Loom plan (JSON text) of the ranks' programs over `spec`, and the
    lowerings (for the places of failures). `data_dims`: the mesh dims that split
    the batch. The plan's outputs are every rank's updated parameters and optimizer
    states, and its loss where the rank holds the whole loss (doc.loss_output)."""
    S = SpecIndex(spec)
    groups = plan_symmetry.groups_of(ranks)
    doc = lowerings = None
    if groups is not None:
        chosen, lowered = plan_symmetry.bases(groups, mesh_sizes)
        if len(lowered) < len(ranks):
            doc, lowerings = _lowered(S, [ranks[r] for r in lowered], mesh_names, mesh_sizes,
                                      data_claim, model_name, data_dims)
            lowerings = plan_symmetry.extend(doc, lowerings, ranks, mesh_sizes, chosen)
            if lowerings is not None:
                doc.lowered = lowered
    if lowerings is None:
        doc, lowerings = _lowered(S, ranks, mesh_names, mesh_sizes, data_claim, model_name,
                                  data_dims)
    losses = []
    for L in lowerings:
        outs = L.results
        for (kind, name), v in zip(L.trace.outputs, outs):
            if kind == "send":
                continue
            if not isinstance(v, PValue):
                raise CaptureError(f"rank {L.device}: output {name} is not a plan value")
            if kind == "loss":
                losses.append(v)
            else:
                doc.outputs.append(v.id)
    # The loss is an output where every rank holds it whole (tensor parallelism);
    # data-parallel ranks each hold their share of it, and torch never adds them.
    doc.loss_output = bool(losses) and all(v.claim.part == C.FULL for v in losses)
    if doc.loss_output:
        doc.outputs = [v.id for v in losses] + doc.outputs
    assemble_collectives(doc, lowerings, mesh_sizes)
    if any(L.rank.pipeline is not None for L in lowerings):
        repair_sum_parts(doc)
    p2p = pipeline_plan.assemble_sends(doc)
    if any(L.rank.pipeline is not None for L in lowerings):
        doc.order = pipeline_plan.pipeline_order(doc, lowerings, p2p)
    return doc, lowerings


def _lowered(S, ranks, mesh_names, mesh_sizes, data_claim, model_name, data_dims):
    """A plan document with the lowerings of `ranks` (each with its .results)."""
    doc = PlanDocument(S, mesh_names, mesh_sizes, model_name)
    lowerings = [RankLowering(S, rank, doc, data_claim) for rank in ranks]
    published = {}
    for L in lowerings:
        L.data_dims = tuple(data_dims)
        L.mesh_sizes = tuple(mesh_sizes)
        L.published = published
        L.used = {}  # micro-batch (None: none) -> the spec nodes its ops were matched to
    for L, outs in zip(lowerings, _lower_together(lowerings, published)):
        L.results = outs
    return doc, lowerings


def _lower_together(lowerings, published):
    """Runs the ranks' lowerings (RankLowering.steps) side by side: one that needs
    what another sends waits until that one has lowered it."""
    steps = [L.steps() for L in lowerings]
    wanted = [None] * len(lowerings)
    results = [None] * len(lowerings)
    running = set(range(len(lowerings)))
    first = set(running)
    while running:
        progressed = False
        for i in sorted(running):
            L = lowerings[i]
            answer = None
            if wanted[i] is not None:
                answer = published.get(pipeline_plan.sender_of(L, wanted[i]))
                if answer is None:
                    continue
            try:
                wanted[i] = next(steps[i]) if i in first else steps[i].send(answer)
            except StopIteration as done:
                results[i] = done.value
                running.discard(i)
            first.discard(i)
            progressed = True
        if not progressed:
            waits = ", ".join(f"rank {lowerings[i].device} waits for {wanted[i]}"
                              for i in sorted(running))
            raise CaptureError(f"the pipeline's stages wait on each other: {waits}")
    return results


