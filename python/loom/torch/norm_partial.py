"""Partial 2-norms of sharded tensors (DTensor's _NormPartial), as the rank computes them.

The 2-norm of a DTensor sharded over ranks (a gradient FSDP shards, in
clip_grad_norm_) is, on each rank, the norm of its own shard: DTensor marks it
_NormPartial, and where the whole norm is needed it squares the ranks' norms,
all-reduces the squares and takes the root. In Loom's terms that is the sum of
squares of the rank's shard (a share of the whole's sum of squares), all-reduced,
then the step's square root: so a rank's norm is kept as its sum of squares
(PartialNorm) until the redistribution that completes it, and norms stacked while
partial (clip_grad_norm_ stacks every parameter's) stay a list (StackedNorms). The
square roots and the stack are then the step's own ops, each on a complete value.
"""

import dataclasses

from loom.torch.errors import CaptureError


@dataclasses.dataclass(frozen=True)
class PartialNorm:
    squares: object    # the rank's sum of squares (a plan value)
    node: object       # the rank's norm node
    spec_node: object  # the step's norm node it is a piece of
    template: tuple    # the step's ops of that node
    cursor: int        # where its square root starts among them
    dcursor: int


@dataclasses.dataclass(frozen=True)
class WholeNorm:
    """A norm the rank holds whole (of a replicated gradient) that DTensor makes a
    share of a partial norm, to stack it with sharded ones: torch divides it by
    n^(1/p) on every rank, so that the ranks' p-th powers sum to its own and the
    completed norm is the norm itself. Loom keeps the norm as it is."""
    value: object      # the whole norm (a plan value)


@dataclasses.dataclass(frozen=True)
class StackedNorms:
    norms: tuple       # PartialNorm
    node: object       # the rank's stack node
    spec_node: object


def is_partial_norm(spec):
    return spec is not None and any(type(p).__name__ == "_NormPartial" for p in spec.placements)


def lower_norm(L, node, m):
    """The rank's norm `node` of its shard, matched to the step's `m`: its sum of
    squares, kept as a PartialNorm."""
    from loom.torch import stage_norms
    from loom.torch.rules.arithmetic import vector_norm_squares
    args = [L._arg(a) for a in node.args]
    if isinstance(args[0], stage_norms.RowRuns):
        squares = stage_norms.partial_squares(L, node, *args)
    else:
        squares = vector_norm_squares(L, node, *args)
    return PartialNorm(squares, node, m, tuple(L.template), L.cursor, L.dcursor)


def element_getitem(node, i):
    """The getitem that reads element i of the foreach node `node`; None if none."""
    import operator
    return next((u for u in node.users if u.target is operator.getitem and u.args[1] == i),
                None)


def is_partial_element(L, node, i):
    """Whether element i of the rank's `_foreach_norm` is the norm of a shard
    (clip_grad_norm_'s foreach norms of DTensor gradients)."""
    g = element_getitem(node, i)
    return g is not None and is_partial_norm(L.rank.recorder.specs.get(g.name))


def lower_norm_element(L, node, i, args):
    """Element i of the rank's `_foreach_norm`, the norm of its shard: its sum of
    squares, kept as a PartialNorm whose square root is the step's element's; the
    element's other ops are left for it (the cursor moves past them)."""
    from loom.torch.rules.arithmetic import vector_norm_squares
    marks = L.S.L.foreach_elements.get(L.spec_node)  # the step's op indices
    # Over some of the step's elements (a pipeline stage's, stage_norms.sub_foreach),
    # the template is theirs, in order.
    sub = getattr(L, "sub_foreach", {}).get(node)
    if marks is not None and sub is not None:
        marks = [marks[p] for p in sub[1]]
    if marks is None or i >= len(marks):
        L.unsupported("the rank's foreach norms are not the model's step's, element by "
                      "element")
    begin = sum(e - b for b, e in marks[:i])
    end = begin + marks[i][1] - marks[i][0]
    if begin != L.cursor:
        L.unsupported("the rank's foreach norms are not the model's step's, element by "
                      "element")
    g = element_getitem(node, i)
    squares = vector_norm_squares(L, g, *args)
    partial = PartialNorm(squares, g, L.spec_node, tuple(L.template[begin:end]),
                          L.cursor - begin, L.dcursor)
    L.cursor = end
    return partial


def stack(L, node, m, norms):
    if not all(isinstance(n, (PartialNorm, WholeNorm)) for n in norms):
        raise CaptureError("partial norms stacked with other values")
    return StackedNorms(tuple(norms), node, m)


def complete(L, marker, reduce_squares):
    """The whole norm (or stack of norms) from a partial one: each sum of squares
    through `reduce_squares` (the redistribution's all-reduces), then the step's own
    square root, and its stack."""
    from loom.torch.rules import RULES
    from loom.torch.rules.arithmetic import vector_norm_from_squares
    import torch
    from loom.torch import stage_norms
    if isinstance(marker, WholeNorm):
        return marker.value
    rows = isinstance(marker, stage_norms.StackedRows)
    norms = marker.norms if isinstance(marker, StackedNorms) or rows else (marker,)
    values = []
    saved = (L.current, L.origin, L.spec_node, L.template, L.cursor, L.dcursor)
    try:
        for n in norms:
            if isinstance(n, WholeNorm):
                values.append(n.value)
                continue
            reduced = reduce_squares(n.squares)
            L.current, L.spec_node, L.template = n.node, n.spec_node, list(n.template)
            L.cursor, L.dcursor = n.cursor, n.dcursor
            L.origin = L.origins.of(n.node, L.node_param.get(n.node))
            values.append(vector_norm_from_squares(L, n.node, reduced))
            if L.cursor != len(L.template):
                L.unsupported("the rank's norm lowers to other ops than the model's step's")
        if rows:
            # A pipeline stage's rows of the step's stack (stage_norms.py).
            node = marker.node
            L.current, L.spec_node = node, marker.spec_node
            L.template, L.cursor, L.dcursor = list(marker.template), 0, 0
            L.origin = L.origins.of(node, L.node_param.get(node))
            return stage_norms.emit_rows(L, node, marker.spec_node, marker.positions, values)
        if isinstance(marker, StackedNorms):
            node = marker.node
            L.current, L.spec_node = node, marker.spec_node
            L.template, L.cursor, L.dcursor = L.S.L.node_ops.get(marker.spec_node, []), 0, 0
            L.origin = L.origins.of(node, L.node_param.get(node))
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            out = RULES[torch.ops.aten.stack.default](L, node, values, dim)
            if L.cursor != len(L.template):
                L.unsupported("the rank's stack of norms lowers to other ops than the model's")
            return out
        return values[0]
    finally:
        L.current, L.origin, L.spec_node, L.template, L.cursor, L.dcursor = saved
