"""The model's step, indexed for matching a rank's ops to it: the op of the same
ATen kind whose operands are the spec images of the rank op's own operands (the
source line, then the order, tell apart ops that read the same operands), a rank's
folded shape-only values bound to the step's they hold a region of, and what the
verifier's bindings say of the step's ops (partition signatures, homogeneity)."""

import collections
import dataclasses
from fractions import Fraction

import torch

import loom
from loom.torch import accumulation
from loom.torch.identities import canonical, is_identity
from loom.torch.lower import user_frame

aten = torch.ops.aten


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

    def candidates_of(self, target):
        """The step's nodes of `target`, in order."""
        want = _CANONICAL_TARGET.get(target, target)
        found = {m for k, ms in self.candidates.items() if k[0] == want for m in ms}
        return [n for n in self.graph.nodes if n in found]

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
        if node.target is aten.slice.Tensor:
            # Slices of one operand along a dim the rank holds whole (a rotary table's
            # cosine and sine halves) are the spec's with the same bounds.
            every = [m for m in every if not _whole_along(node, m) or
                     tuple(_arg(m, i) for i in (1, 2, 3)) ==
                     tuple(_arg(node, i) for i in (1, 2, 3))] or every
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

    def fill_alike(self, node):
        """The step's op of `node`'s kind (a ones_like, a zeros_like) that gives a
        tensor of the same shape, dtype and value on any operand, at the same line
        first; None if the step has none. Its value is the rank's whatever it was
        computed from; what reads it says whether the step reads the same."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        fits = []
        for k, ms in self.candidates.items():
            if k[0] != _target(node):
                continue
            for m in ms:
                theirs = m.meta.get("val")
                if isinstance(theirs, torch.Tensor) and theirs.shape == val.shape and \
                        theirs.dtype == val.dtype and m.kwargs == node.kwargs and \
                        m.args[1:] == node.args[1:]:
                    fits.append(m)
        fresh = [m for m in fits if m not in self.used]
        site = _site(node)
        chosen = [m for m in fresh if _site(m) == site] or fresh
        if not chosen:
            return None
        self.used.add(chosen[0])
        return chosen[0]

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

    def scale_of(self, index, factors, zeros, members=()):
        """The factor a piece of spec op `index` holds when its operands hold
        `factors` (Fractions; `zeros`: operands holding zeros; `members`: what
        EvenShareFactors reads, plan_document._members), by the op's homogeneity
        (verify/homogeneity.h, through the bindings); 1 where the op is not
        proportional to a scaled operand (the verifier says so there)."""
        op = self.g.ops[index]
        # A piece of a fill with 0 is zeros, whatever its factor.
        zeros = [z or self.zero_fill(n) for z, n in zip(zeros, op["inputs"])]
        if all(f == 1 or z for f, z in zip(factors, zeros)):
            return Fraction(1)
        types = [(list(self.g.types[n][1]), self.g.types[n][0]) for n in op["inputs"]]
        r = loom.scale_of_piece(op["kind"], types, op["attrs"],
                                [(f.numerator, f.denominator) for f in factors],
                                [bool(z) for z in zeros], list(members))
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


def _whole_along(node, m):
    """Whether a rank's slice reads its operand whole along the sliced dim: the same
    size there as the spec's slice `m` reads."""
    def size(n):
        x = n.args[0] if n.args else None
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        dim = _arg(n, 1) or 0
        if val is None or not hasattr(val, "shape") or not -len(val.shape) <= dim < len(val.shape):
            return None
        return val.shape[dim]
    a, b = size(node), size(m)
    return a is not None and a == b


def _arg(node, i):
    if i < len(node.args):
        return node.args[i]
    return None
