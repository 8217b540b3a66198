"""Clipping under pipeline parallelism: a stage's norm of its own gradients, completed
over the pipeline group (torchtitan's dist_utils.clip_grad_norm_ with pp_mesh).

A pipeline rank holds some of the model's parameters, so clip_grad_norm_ on it runs
on some of the step's gradients: `_foreach_norm` of its own (each a complete norm of
the step's), their stack (rows of the step's stack of every norm, where the rank's
parameters are consecutive in the model's order), the 2-norm of that (in Loom's
terms the rows' sum of squares, a share of the step's sum of squares, kept as a
norm_partial.PartialNorm), then `total **= 2`, an all-reduce (SUM) over the pipeline
group and `total **= 0.5`: the step's norm, whose square root is the step's own op.
The clip coefficient is then the step's, and `_foreach_mul_` scales the rank's
gradients by it. Lowered here:

- a foreach op over some of the elements of one of the step's (`sub_foreach`): each
  element as the step's element it is (Lowering.foreach_elements: its ops);
- a stack of some of the step's stacked values (`stack_rows`): each element as the
  step makes it, then a local concat per run of consecutive ones that holds those rows
  of the step's stack (the verifier reads a concat of whole consecutive inputs of one
  of the step's concats as that region of its output); a rank with several stages
  (interleaved, V-shaped schedules) holds several runs, whose norm is the sum of the
  runs' sums of squares (`partial_squares`);
- the norm of those rows, its square, the all-reduce of the square and its square
  root (`PartialNorm` -> `SquaredNorm` -> `ReducedSquares` -> the step's norm).
"""

import dataclasses

import torch

from loom.torch import claims as C
from loom.torch import norm_partial
from loom.torch.identities import canonical
from loom.torch.rules import _out
from loom.torch.spec_index import _getitem

aten = torch.ops.aten
_POWERS = (aten.pow.Tensor_Scalar, aten.pow_.Scalar)


@dataclasses.dataclass(frozen=True)
class SquaredNorm:
    """A rank's partial norm squared: its sum of squares, a share of the step's."""
    partial: norm_partial.PartialNorm


@dataclasses.dataclass(frozen=True)
class ReducedSquares:
    """A partial norm's sum of squares summed over the ranks: the step's, complete
    (`value`), before the step's square root."""
    partial: norm_partial.PartialNorm
    value: object


@dataclasses.dataclass(frozen=True)
class RowRuns:
    """A stack of some of the step's stacked values that are not consecutive in its
    order (the stages of an interleaved or V-shaped pipeline rank): one local concat
    per run of consecutive ones, each that region of the step's stack. Only the norm
    of the stack reads it (partial_squares)."""
    values: tuple


def _images(R, nodes):
    return [canonical(R._spec_image(a)) if R._spec_image(a) is not None else None
            for a in nodes]


def sub_foreach(R, node):
    """A foreach op over some of the elements of a foreach op of the step's with the
    same other operands: lowered as those elements of it. False where there is none."""
    name = getattr(node.target, "__name__", "")
    if not name.startswith("_foreach_") or not node.args or \
            not isinstance(node.args[0], (list, tuple)) or node.kwargs:
        return False
    mine = _images(R, node.args[0])
    if None in mine:
        return False
    rest = _rest(R, node.args[1:], lambda a: canonical(R._spec_image(a))
                 if R._spec_image(a) is not None else None)
    for m in R.S.candidates_of(node.target):
        if not isinstance(m.args[0], (list, tuple)) or len(m.args[0]) <= len(mine) or \
                m.kwargs or _rest(R, m.args[1:], canonical) != rest:
            continue
        theirs = [canonical(a) for a in m.args[0]]
        marks = R.S.L.foreach_elements.get(m)
        if marks is None or not all(x in theirs for x in mine):
            continue
        positions = [theirs.index(x) for x in mine]
        ops = R.S.L.node_ops.get(m, [])
        first = ops[0] if ops else 0
        R.S.used.add(m)
        R.image[node] = m
        R.spec_node = m
        R.template = [ops[i - first] for p in positions for i in range(*marks[p])]
        R.cursor = R.dcursor = 0
        R.sub_foreach[node] = (m, positions)
        R._bind_operands(node)
        R.env[node] = R._lower(node)
        if R.cursor != len(R.template):
            R.unsupported(f"the rank lowers '{node.target}' to fewer ops than the model's "
                          "step does")
        return True
    return False


def _rest(R, args, image):
    """A foreach op's arguments after its list: nodes as the step's nodes they are."""
    out = []
    for a in args:
        if isinstance(a, torch.fx.Node):
            out.append(image(a))
        elif isinstance(a, (list, tuple)):
            out.append(tuple(image(x) if isinstance(x, torch.fx.Node) else x for x in a))
        else:
            out.append(a)
    return tuple(out)


def element_of(R, node):
    """A getitem of a sub_foreach's result: the step's getitem of the element it is."""
    source, i = node.args
    m, positions = R.sub_foreach[source]
    spec = next((u for u in m.users if u.target is _getitem() and u.args[1] == positions[i]),
                None)
    if spec is None:
        R.unsupported(f"the model's step never reads element {positions[i]} of its "
                      f"'{m.target}'")
    R.image[node] = spec
    R.env[node] = R.env[source][i]


def stack_rows(R, node):
    """A stack along dim 0 of some of the values a stack of the step's stacks, in its
    order: each element as the step makes it, then a local concat per run of
    consecutive ones holding those rows of the step's stack (RowRuns where there are
    several). False where there is none."""
    if node.target is not aten.stack.default or not isinstance(node.args[0], (list, tuple)):
        return False
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim != 0:
        return False
    mine = _images(R, node.args[0])
    if None in mine:
        return False
    for m in R.S.candidates_of(node.target):
        theirs = [canonical(a) for a in m.args[0]]
        mdim = m.args[1] if len(m.args) > 1 else m.kwargs.get("dim", 0)
        if mdim != 0 or len(theirs) <= len(mine) or not all(x in theirs for x in mine):
            continue
        positions = [theirs.index(x) for x in mine]
        if any(b <= a for a, b in zip(positions, positions[1:])):
            continue
        ops = R.S.L.node_ops.get(m, [])
        per, rest = divmod(len(ops) - 1, len(theirs))
        if rest or per < 1 or R.S.g.ops[ops[-1]]["kind"] != "concat":
            continue
        R.S.used.add(m)
        R.image[node] = m
        R.spec_node = m
        R.template = [i for p in positions for i in ops[p * per:(p + 1) * per]]
        R.cursor = R.dcursor = 0
        R._bind_operands(node)
        elements = [R.env[a] for a in node.args[0]]
        norms = [isinstance(e, (norm_partial.PartialNorm, norm_partial.WholeNorm))
                 for e in elements]
        if any(norms):
            # The norms of shards (FSDP's, TP's): DTensor completes the stack before
            # its norm; each element is completed then, and the rows made of them.
            if not all(norms):
                R.unsupported("a pipeline stage stacks the norms of shards with other values")
            R.env[node] = StackedRows(tuple(elements), node, m, tuple(R.template),
                                      tuple(positions))
            R.cursor = len(R.template)
            return True
        R.env[node] = emit_rows(R, node, m, positions, elements)
        return True
    return False


@dataclasses.dataclass(frozen=True)
class StackedRows:
    """A stage's stack of the norms of shards (rows of the step's stack of norms), each
    a partial norm until the redistribution that completes the stack: then each is
    completed (norm_partial.complete) and the rows are made of them (emit_rows)."""
    norms: tuple       # norm_partial.PartialNorm or WholeNorm
    node: object       # the rank's stack node
    spec_node: object  # the step's stack node
    template: tuple    # the step's ops of those rows: each element's, then the concat
    positions: tuple   # the rows, in the step's stack


def emit_rows(R, node, m, positions, elements):
    """The rows `positions` of the step's stack `m` from the rank's values `elements`
    (complete values of the step's stacked ones, in order), on R's template of those
    rows: each element as the step makes it, then one local concat per run of
    consecutive rows; the value, or RowRuns where there are several runs."""
    dtype, _ = _out(node)
    parts = []
    for t in elements:
        parts.append(R.reshape(R.cast(t, dtype), [1] + list(t.dims)))
    if R.cursor != len(R.template):
        R.unsupported("the rank stacks its values with other ops than the model's step")
    ops = R.S.L.node_ops.get(m, [])
    concat = R.S.g.ops[ops[-1]]
    whole = R.S.dims(concat["outputs"][0])
    runs, start = [], 0
    for i in range(1, len(positions) + 1):
        if i == len(positions) or positions[i] != positions[i - 1] + 1:
            runs.append((start, i))
            start = i
    values = []
    for a, b in runs:
        first = positions[a]
        box = ((first, first + b - a),) + tuple((0, d) for d in whole[1:])
        claim = C.Claim(tensor=R.S.tensor_id[concat["outputs"][0]], box=box, part=C.FULL)
        out = R.doc.value(R.device, claim, parts[0].dtype, (b - a,) + tuple(whole[1:]))
        R.doc.task(R.device, -1, "concat", {"dim": 0}, parts[a:b], [out], concat["phase"],
                   -1, R.origin)
        values.append(out)
    return values[0] if len(values) == 1 else RowRuns(tuple(values))


def partial_squares(L, node, runs, *args):
    """The sum of squares of a RowRuns stack: each run's, as the step's norm computes
    it on those rows, summed locally (a share of the step's sum of squares)."""
    from loom.torch.rules.arithmetic import vector_norm_squares
    start = L.cursor
    sums = []
    for v in runs.values:
        L.cursor = start
        sums.append(vector_norm_squares(L, node, v, *args))
    union = sorted(p for s in sums for p in s.claim.part)
    merged = [list(union[0])]
    for lo, hi in union[1:]:
        if lo == merged[-1][1]:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    first = sums[0]
    claim = dataclasses.replace(first.claim, part=tuple((lo, hi) for lo, hi in merged))
    out = L.doc.value(L.device, claim, first.dtype, first.dims)
    phase = L.S.g.ops[L.template[start]]["phase"]
    L.doc.task(L.device, -1, "accumulate", {}, sums, [out], phase, -1, L.origin)
    return out


def holds_rows(R, x):
    """Whether the rank's value of `x` (the operand of its norm) holds only some of
    the positions of the step's tensor it is a piece of: the norm is partial."""
    v = R.env.get(x)
    if isinstance(v, RowRuns):
        return True
    if not hasattr(v, "claim"):
        return False
    whole = R.S.g.types[R._tensor_name(v.claim.tensor)][1]
    return tuple(e - b for b, e in v.claim.box) != tuple(whole)


def power(R, node):
    """`total **= 2` of a partial norm, `total **= 0.5` of its summed squares. False for
    any other power."""
    if node.target not in _POWERS:
        return False
    base, exponent = node.args[0], node.args[1]
    v = R.env.get(base)
    if isinstance(v, norm_partial.PartialNorm) and exponent == 2:
        R.env[node] = SquaredNorm(v)
        R.image[node] = R.image.get(base)
        return True
    if isinstance(v, ReducedSquares) and exponent == 0.5:
        R.env[node] = norm_partial.complete(R, v.partial, lambda squares: v.value)
        R.image[node] = v.partial.spec_node
        return True
    if isinstance(v, (SquaredNorm, ReducedSquares, norm_partial.PartialNorm)):
        R.unsupported(f"a power {exponent} of a stage's partial norm (its square, summed "
                      "over the pipeline group, then its square root are)")
    return False


def read_unreduced(R, node):
    """A stage's partial norm that `node` reads as it is, never summed over the
    pipeline group (clipping by the stage's own norm): lowered as what the rank
    computes, the square root of its own rows' sum of squares, which the verifier
    finds to be a partial sum where the step's norm is complete."""
    for a in node.all_input_nodes:
        v = R.env.get(a)
        if isinstance(v, norm_partial.PartialNorm) and a in R.stage_partials:
            R.env[a] = norm_partial.complete(R, v, lambda squares: squares)
