"""Values a program computes from shapes alone: folded, and compared concretely.

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
"""

import itertools

import torch


def _placeholder_free(graph):
    """FX nodes that depend on no placeholder (only on constants and shapes)."""
    free = set()
    for node in graph.nodes:
        if node.op == "get_attr":
            free.add(node)
        elif node.op == "call_function":
            inputs = node.all_input_nodes
            if all(a in free for a in inputs):
                free.add(node)
    return free


def foldable(graph, live):
    """The shape-only nodes the rest of the program reads, of more than one element,
    in graph order: each is folded into a constant."""
    free = _placeholder_free(graph)
    out = []
    for node in graph.nodes:
        if node not in free or node not in live:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.numel() <= 1:
            continue
        if any(u not in free or u.op == "output" for u in node.users):
            out.append(node)
    return out


def evaluate(module, nodes):
    """The concrete values of `nodes` (shape-only FX nodes of `module`'s graph), by
    running their ancestors on real tensors; None for a node whose constants the trace
    does not know (a fake tensor constant)."""
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
            if node.op == "get_attr":
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
