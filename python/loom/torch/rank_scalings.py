"""A rank's own scalings by a constant (a gradient divided by the world size, a loss
divided by the micro-batches): where the step scales the same value by a constant of
its own, the rank's value is the step's, times what remains; where it does not, a
local `scale` whose output claims the factor, which the verifier carries on. A rank op
that reads a value the step reads scaled is a failure of class scaled."""

import dataclasses

import torch

from loom.torch import claims as C
from loom.torch.identities import canonical
from loom.torch.plan_document import PValue, implied_claims

aten = torch.ops.aten


def explain_scale(R, node, m):
    """A rank op matched to the spec's `m` on one other operand: where the spec
    reads that operand divided or multiplied by a constant (a gradient averaged
    over micro-batches) and the rank the undivided value, the plan is scaled: a
    failure of class scaled, at this op."""
    ours = R.S.key(node, R._spec_image)[1]
    theirs = R.S.key(m, lambda a: a)[1]
    for x, y in zip(ours, theirs):
        if x is y or not isinstance(y, torch.fx.Node) or y.op != "call_function":
            continue
        if y.target not in (aten.div.Tensor, aten.mul.Tensor) or len(y.args) < 2 or \
                not isinstance(y.args[1], (int, float)) or canonical(y.args[0]) is not x:
            continue
        c = float(y.args[1])
        factor = c if y.target is aten.div.Tensor else 1.0 / c
        name = R.S.L.env[y].name if y in R.S.L.env else y.name
        R.doc.failures.append(dict(
            cls="scaled", tensor=name, devices=[R.device],
            message=(f"the rank reads '{x.name}' where the model's step reads it "
                     f"{'divided' if y.target is aten.div.Tensor else 'multiplied'} by "
                     f"{c:g} (scaled by {factor:g})"),
            origin=R.origin))


def extra_scale(R, node):
    """A division or multiplication by a number the model's step does not make
    (a gradient divided by the world size, a loss divided by the micro-batches):
    the value times that factor, a local `scale` with no op of the step, whose
    output claims the factor (docs/formats.md). The verifier carries it on."""
    if node.target not in (aten.div.Tensor, aten.mul.Tensor, aten.div_.Tensor,
                           aten.mul_.Tensor) or len(node.args) < 2 or \
            not isinstance(node.args[1], (int, float)) or isinstance(node.args[1], bool) or \
            not isinstance(node.args[0], torch.fx.Node) or node.args[0] not in R.env:
        return False
    source = node.args[0]
    image = R.image.get(source)
    v = R.env[source]
    if image is None or not isinstance(v, PValue) or node.args[1] == 0:
        return False
    factor = _factor_of(node)
    spec_scaling = _spec_scaling_of(R, image, factor)
    if spec_scaling is not None:
        # The step scales the same value by a constant of its own: the rank's
        # value is that one (the step's op on it), times what remains.
        image, index, factor = spec_scaling
        op = R.S.g.ops[index]
        claim = implied_claims(R.S, index, [v], [R.S.tensor_id[op["outputs"][0]]])[0]
        theirs = R.doc.value(R.device, claim, v.dtype, v.dims)
        R.doc.task(R.device, index, op["kind"], op["attrs"], [v], [theirs],
                      op["phase"], op["layer"], R.origin)
        R.S.used.add(image)
        R.env[node], R.image[node] = theirs, image
        if factor == 1:
            return True
        v = theirs
    out = R.doc.value(R.device, dataclasses.replace(v.claim, scale=v.claim.scale * factor),
                         v.dtype, v.dims)
    R.doc.task(R.device, -1, "scale", {"factor": float(factor)}, [v], [out],
                  R.origin.get("phase", "forward"), -1, R.origin)
    R.env[node] = out
    R.image[node] = image
    R.doc.scalings.append(dict(value=out.id, device=R.device, factor=factor,
                                  what=f"the program's own scaling by {factor}",
                                  origin=R.origin))
    return True


def _spec_scaling_of(R, image, factor):
    """Where the step multiplies (divides) the value `image` by a constant of its
    own (a loss times 1/8 where the rank divides its own by 8, or by 2): (that
    product's node, its op, the rank's factor over the step's), preferring the
    one of the same factor; None where the step makes none, or several of other
    factors."""
    lowered = R.S.L.env.get(image)
    found = []
    for y in image.users if lowered is not None else ():
        if y.op == "call_function" and y.target in (aten.div.Tensor, aten.mul.Tensor) and \
                len(y.args) == 2 and y.args[0] is image and \
                isinstance(y.args[1], (int, float)) and not isinstance(y.args[1], bool) and \
                y.args[1] != 0 and len(R.S.L.node_ops.get(y, ())) == 1:
            index = R.S.L.node_ops[y][0]
            op = R.S.g.ops[index]
            if len(op["inputs"]) == 1 and len(op["outputs"]) == 1 and \
                    op["inputs"][0] == getattr(lowered, "name", None):
                found.append((y, index, factor / _factor_of(y)))
    same = [f for f in found if f[2] == 1]
    if same or len(found) == 1:
        return (same or found)[0]
    return None


def _factor_of(node):
    """The rational a multiplication (division) by a number multiplies by."""
    c = C.rational_of(node.args[1])
    return 1 / c if node.target in (aten.div.Tensor, aten.div_.Tensor) else c
