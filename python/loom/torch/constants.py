"""Values a program computes from shapes alone, or from the batch's integer data
alone into a scalar: folded, and compared concretely.

A model computes some tensors from nothing but shapes and constants: the positions
of the tokens, the causal mask (Hugging Face builds it with aranges, comparisons and
gathers indexed by batch row). Such a value is the same function of the shapes in the
model's step and on every rank; a rank computes its own part of it with its own
local shapes (a data-parallel rank's mask rows from an arange over its own batch).

Each such value the rest of the program reads (with more than one element) is
computed here, concretely, and becomes an input of Loom's graph: in the spec, its
value; on a rank, the region of the spec's value it equals, found by comparing the
values element by element. A rank whose value is no region of the spec's (positions
that are not offset by the rank's place in the sequence) is a failure at the op that
made it. The comparison is exact and needs no data: these values depend on nothing
a batch holds.

A scalar computed from the batch's integer data alone (a loss's token count, the
labels that are not ignored) is folded too, from the batch given: the proof is of
the step on that batch's counts. A rank's scalar holds the spec's times their
ratio (scaled_region): a data-parallel rank counting 6 of the batch's 22 tokens
holds 6/22 of the count, and the verifier carries that factor through the ranks'
normalisation (docs/formats.md, "scale").
"""

import itertools

import torch


def _communicates(node):
    """A collective (functional or c10d): its value is other ranks' too, so nothing
    after it is this rank's alone to fold."""
    name = getattr(node.target, "name", None)
    name = name() if callable(name) else str(node.target)
    return name.startswith(("_c10d_functional::", "c10d::", "_dtensor::"))


def _placeholder_free(graph, concrete=()):
    """FX nodes that depend on no placeholder but those of `concrete` (only on
    constants, shapes and the batch's integer data), and those of them that depend
    on the batch's data."""
    free, data = set(), set()
    for node in graph.nodes:
        if node.op == "get_attr":
            free.add(node)
        elif node.op == "placeholder" and node in concrete:
            free.add(node)
            data.add(node)
        elif node.op == "call_function" and not _communicates(node):
            inputs = node.all_input_nodes
            if all(a in free for a in inputs):
                free.add(node)
                if any(a in data for a in inputs):
                    data.add(node)
    return free, data


def foldable(graph, live, concrete=()):
    """The nodes folded into constants, in graph order: shape-only values the rest of
    the program reads, of more than one element; and the scalars it reads that depend
    on the batch's integer data alone (a loss's token count: how many labels are not
    ignored), computed from `concrete` (placeholder node -> its integer value)."""
    free, data = _placeholder_free(graph, concrete)
    out = []
    for node in graph.nodes:
        if node not in free or node not in live or node.op == "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        if val.numel() <= 1 and (node not in data or val.numel() == 0):
            continue
        if val.numel() > 1 and node in data:
            continue  # the batch's tensors stay data, claimed as the batch's rows
        if any(u not in free or u.op == "output" for u in node.users):
            out.append(node)
    return out


def concrete_data(graph, placeholders, data=None):
    """The batch's integer tensors a trace reads, with their values: placeholder node
    -> value, from `data` (placeholder name -> tensor: a rank standing in with another
    rank's trace reads its own batch) or else the value the trace was given; fake
    tensors have none."""
    from torch._subclasses.fake_tensor import FakeTensor
    data = data or {}
    out = {}
    nodes = [n for n in graph.nodes if n.op == "placeholder"]
    for node, ph in zip(nodes, placeholders):
        value = data.get(ph.name, ph.value)
        if ph.kind == "input" and isinstance(value, torch.Tensor) and \
                not value.is_floating_point() and not value.is_complex() and \
                not isinstance(value, FakeTensor):
            out[node] = value
    return out


def data_scalars(trace, data=None):
    """The values of the scalars the trace folds from its batch's data (with `data`,
    placeholder name -> tensor, for its batch), as a tuple of Python numbers."""
    graph = trace.module.graph
    concrete = concrete_data(graph, trace.placeholders, data)
    if not concrete:
        return ()
    _, depends = _placeholder_free(graph, concrete)
    nodes = [n for n in foldable(graph, set(graph.nodes), concrete) if n in depends]
    values = evaluate(trace.module, nodes, concrete)
    return tuple(None if values[n] is None else values[n].reshape(-1).tolist()[0]
                 for n in nodes)


def evaluate(module, nodes, concrete=None):
    """The concrete values of `nodes` (FX nodes of `module`'s graph that depend on
    nothing but constants, shapes and the placeholders of `concrete`, node -> value),
    by running their ancestors on real tensors; None for a node whose constants the
    trace does not know (a fake tensor constant)."""
    concrete = concrete or {}
    graph = module.graph
    needed = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    values = {}
    for node in graph.nodes:
        if node not in needed:
            continue
        try:
            if node.op == "placeholder":
                values[node] = _real(concrete[node]) if node in concrete else None
            elif node.op == "get_attr":
                t = getattr(module, node.target)
                values[node] = _real(t)
            else:
                args = torch.fx.node.map_arg(node.args, lambda a: values[a])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: values[a])
                if any(v is None for v in _leaves((args, kwargs))):
                    values[node] = None
                    continue
                kwargs = {k: (torch.device("cpu") if k == "device" else v)
                          for k, v in kwargs.items()}
                with torch.no_grad():
                    values[node] = node.target(*args, **kwargs)
        except Exception:  # a constant this process cannot compute
            values[node] = None
    return {n: values.get(n) for n in nodes}


def _leaves(tree):
    return torch.utils._pytree.tree_leaves(tree)


def _real(t):
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(t, FakeTensor):
        c = getattr(t, "constant", None)
        return None if c is None else c.clone()
    return t.detach().clone()


def scaled_region(whole, piece, preferred=None):
    """(box, scale): the region of `whole` that `piece` holds `scale` times. A
    scalar holds the whole scalar times its ratio to it (a rank's token count of the
    batch's: Fraction(6, 22)); anything else is an exact region (region_of), scale
    1. None when there is no such region (or the whole scalar is 0 and the piece
    not)."""
    from fractions import Fraction
    if whole.numel() == 1 and piece.numel() == 1 and whole.dim() == piece.dim():
        w, p = whole.reshape(()).item(), piece.reshape(()).item()
        box = tuple((0, 1) for _ in range(whole.dim()))
        if w == p:
            return box, Fraction(1)
        if w == 0 or not all(map(_finite, (w, p))):
            return None
        return box, Fraction(p) / Fraction(w)
    box = region_of(whole, piece, preferred)
    return None if box is None else (box, Fraction(1))


def _finite(x):
    import math
    return not isinstance(x, float) or math.isfinite(x)


def region_of(whole, piece, preferred=None):
    """A box of `whole` whose values are `piece`'s, exactly: ((begin, end), ...), or
    None. Along a dim where the piece is shorter, pieces of its size aligned to it
    are tried (the `preferred` begin first, where given for that dim)."""
    if whole.dim() != piece.dim():
        return None
    options = []
    for d in range(whole.dim()):
        W, P = whole.shape[d], piece.shape[d]
        if P == W:
            options.append([0])
            continue
        if P > W or P == 0:
            return None
        begins = []
        if preferred and d in preferred and preferred[d] + P <= W:
            begins.append(preferred[d])
        begins += [k for k in range(0, W - P + 1, P) if k not in begins]
        options.append(begins)
    for begins in itertools.product(*options):
        box = tuple((b, b + piece.shape[d]) for d, b in enumerate(begins))
        view = whole[tuple(slice(b, e) for b, e in box)]
        if torch.equal(view.to(piece.dtype), piece):
            return box
    return None
