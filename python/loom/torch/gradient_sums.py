"""Sums of gradient contributions, lowered in the step's own grouping.

autograd adds up the gradient contributions a tensor receives as they arrive: a value
three ops read gets ((a + b) + c). Where a rank's tensor crosses a DTensor boundary (a
sequence-parallel norm reads, as a DTensor, the local tensor the block before handed
on: torchtitan's plan with local outputs) the contributions on the DTensor's side are
summed first and then added to the local side's: a + (b + c). Both are the same sum;
matched op by op, the rank's grouping has no counterpart in the step's.

A rank's backward add that no op of the step computes, and whose result only other
backward adds read, is therefore held as its terms (PendingSum) until the add that
completes the sum; that one is lowered as the step's own additions of the same terms,
in the step's grouping (each task paired with the step's add it is a piece of). Where
the step sums other terms, the rank's adds are lowered as they are and the verifier
says where they differ.
"""

import collections
import dataclasses

import torch

aten = torch.ops.aten


@dataclasses.dataclass
class PendingSum:
    """A rank's sum not lowered yet: its terms, (value, spec image) pairs, and the rank's
    add nodes it stands for, in order."""
    terms: list
    nodes: list


def is_gradient_add(node):
    """An add of two tensors autograd makes in the backward (no alpha)."""
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and
            node.target is aten.add.Tensor and len(node.args) == 2 and not node.kwargs and
            all(isinstance(a, torch.fx.Node) for a in node.args) and
            (node.meta.get("custom") or {}).get("phase") == "backward")


def _only_summed(node):
    """Whether every op that reads `node` is a backward add."""
    return bool(node.users) and all(is_gradient_add(u) for u in node.users)


def lower(L, node, canonical):
    """Lowers the rank's gradient add `node` (RankLowering L) if it is a sum the step
    groups otherwise; True if done, False to lower it op by op. `canonical(spec
    node)`: the node its identity chain starts from."""
    pending = [a for a in node.args if isinstance(L.env.get(a), PendingSum)]
    if not pending and L.S.has_match(node, L._spec_image):
        return False
    terms = []
    for a in node.args:
        v = L.env.get(a)
        terms += v.terms if isinstance(v, PendingSum) else [(v, L._spec_image(a))]
    if any(image is None for _, image in terms):
        return _materialize(L, pending)
    if _only_summed(node):
        L.env[node] = PendingSum(terms, [n for a in pending for n in L.env[a].nodes] + [node])
        return True
    found = _step_grouping(L.S, [image for _, image in terms], canonical)
    if found is None:
        return _materialize(L, pending)
    root, order = found
    L.env[node] = _emit(L, terms, order, canonical)
    L.image[node] = root
    spec = L.rank.recorder.specs.get(node.name)
    if spec is not None:
        L.env[node] = L._claimed(L.env[node], spec)
    return True


def _materialize(L, pending):
    """The pending sums `node` reads, lowered op by op after all; False (lower `node`
    so too)."""
    for a in pending:
        for n in L.env.pop(a).nodes:
            L.lower_op(n)
    return False


def _step_grouping(S, images, canonical):
    """(root, additions) of the step's sum of exactly the spec values `images` (a
    multiset): the add whose tree of backward adds has those values as its leaves, and
    its adds in the order they compute; None if the step sums them nowhere."""
    want = collections.Counter(canonical(i) for i in images)
    candidates, seen = [], set()
    frontier = list(want)
    while frontier:
        n = frontier.pop()
        for u in n.users:
            if is_gradient_add(u) and u not in seen and u not in S.used:
                seen.add(u)
                candidates.append(u)
                frontier.append(u)
    index = {n: i for i, n in enumerate(S.graph.nodes)}
    for root in sorted(candidates, key=index.get):
        remaining = collections.Counter(want)
        order = []
        if _leaves(root, remaining, order, canonical) and not +remaining:
            return root, order
    return None


def _leaves(n, remaining, order, canonical):
    c = canonical(n)
    if remaining[c] > 0:
        remaining[c] -= 1
        return True
    if not is_gradient_add(n):
        return False
    if not all(_leaves(a, remaining, order, canonical) for a in n.args):
        return False
    order.append(n)
    return True


def _emit(L, terms, order, canonical):
    """The step's additions `order` of the rank's `terms`, each a task paired with
    the step's add; the value of the last."""
    available = collections.defaultdict(list)
    for value, image in terms:
        available[canonical(image)].append(value)
    made = {}
    out = None
    for m in order:
        operands = []
        for a in m.args:
            operands.append(made[a] if a in made else available[canonical(a)].pop(0))
        L.S.used.add(m)
        L.template = L.S.L.node_ops.get(m, [])
        L.cursor = 0
        a, b = operands
        out = made[m] = L.emit("add", [a, b], {}, (a.dtype, tuple(a.dims)))
        if L.cursor != len(L.template):
            L.unsupported("the rank sums gradients the model's step sums with other ops")
    return out
