"""A rank's gradient accumulation as a piece of the step's (accumulation.py): its own
terms where the step has them, zeros for the terms other ranks add, the result
claiming the share of the terms it holds (term k of n: [k/n, (k+1)/n)); a rank
gradient that is one term of a step's chain, read after the rank's backward, as
that share too. A pipelined rank's sums over its micro-batches (pipeline.py marks
them) add such shares, or partial sums of a gradient the step computes whole."""

import dataclasses

from loom.torch import claims as C
from loom.torch.errors import RefutedWhileLowering
from loom.torch.plan_document import implied_claims
from loom.torch.rank_collectives import _union


def completes_a_term(R, node, canonical):
    """Whether `node`, which no chain of the rank's adds up and which the rank's code
    after its backward reads, is one term of a chain of the step's that nothing else
    reads there (a rank that runs one micro-batch where the step runs several): what
    reads it reads the rank's share of the sum."""
    image = R.image.get(node)
    if image is None or node in R.chains.links:
        return False
    term = canonical(image)
    return term in R.S.chain_term and \
        all(u in R.S.chains.links or u.users and all(w in R.S.chains.links for w in u.users)
            for u in term.users)


def lower_rank_chain(R, node, terms, canonical):
    """A rank's chain ending at `node` (RankLowering R), as a piece of the step's chain
    its terms are terms of (the module docstring)."""
    S = R.S
    images = [canonical(R._spec_image(t)) if R._spec_image(t) is not None else None
              for t in terms]
    found = {S.chain_term.get(i) for i in images}
    if None in found or len({last for last, _ in found}) != 1:
        R.unsupported("the rank accumulates gradients over its backward calls that are not "
                      "terms of one gradient the model's step accumulates")
    last = next(iter(found))[0]
    spec_terms = S.chains.terms[last]
    index = S.L.node_ops[last][0]
    op = S.g.ops[index]
    groups = {}
    for i, t in zip(images, terms):
        groups.setdefault(S.chain_term[i][1], []).append(R.env[t])
    held = {p: _sum_of_pieces(R, vs, op) for p, vs in groups.items()}
    ref = held[min(held)]
    if any(v.claim.box != ref.claim.box for v in held.values()):
        R.unsupported("the rank accumulates gradients of different regions of a parameter")
    R.S.used.add(last)
    R.image[node] = last
    R.template, R.cursor = [index], 0
    if len(held) == len(spec_terms):
        return R.emit("accumulate", [held[p] for p in range(len(spec_terms))], {},
                      (ref.dtype, tuple(ref.dims)))
    if any(v.claim.part != C.FULL for v in held.values()):
        R.unsupported("the rank accumulates shares of gradients over some of the model's "
                      "micro-batches")
    inputs = []
    for p, name in enumerate(op["inputs"]):
        if p in held:
            inputs.append(held[p])
            continue
        claim = C.Claim(tensor=S.tensor_id[name], box=ref.claim.box, part=C.EMPTY)
        zero = R.doc.value(R.device, claim, ref.dtype, ref.dims)
        R.doc.task(R.device, -1, "fill", {"shape": list(ref.dims), "value": 0.0,
                                          "dtype": ref.dtype}, [], [zero],
                   op["phase"], -1, R.origin)
        inputs.append(zero)
    claim = implied_claims(S, index, inputs, [S.tensor_id[op["outputs"][0]]])[0]
    claim.part = _union([C.share(C.FULL, p, len(spec_terms)) for p in held])
    out = R.doc.value(R.device, claim, ref.dtype, ref.dims)
    R.doc.task(R.device, index, "accumulate", {}, inputs, [out], op["phase"], op["layer"],
               R.origin)
    R.cursor = 1
    return out


def _sum_of_pieces(R, values, op):
    """Rank terms that are pieces of one term of the step's (micro-batches that are
    pieces of one of the step's), added: a local sum claiming the union of their
    shares. One value as it is."""
    if len(values) == 1:
        return values[0]
    ref = values[0]
    if any(v.claim.box != ref.claim.box or v.claim.tensor != ref.claim.tensor for v in values):
        R.unsupported("the rank adds pieces of one micro-batch's gradient that hold different "
                      "regions of it")
    scales = [v.claim.scale for v in values]
    if len(set(scales)) > 1:
        # Every row of the step's micro-batch is the rank's alone and enters its sum
        # once: pieces at different multiples make no multiple of the whole.
        R.doc.failures.append(dict(
            cls="scaled", tensor=op["outputs"][0], devices=[R.device],
            message=(f"rank {R.device} adds {len(values)} pieces of one micro-batch's "
                     f"gradient of the model's step scaled by "
                     f"{', '.join(_text(x) for x in scales)}: their sum is no multiple of "
                     "it (its smaller micro-batches weigh their rows unlike the step's, "
                     "such as a mean over each one's own tokens)"),
            origin=R.origin))
        raise RefutedWhileLowering(R.doc)
    out = ref
    for v in values[1:]:
        claim = C.Claim(tensor=ref.claim.tensor, box=ref.claim.box,
                        part=_union([out.claim.part, v.claim.part]), scale=ref.claim.scale)
        total = R.doc.value(R.device, claim, ref.dtype, ref.dims)
        R.doc.task(R.device, -1, "accumulate", {}, [out, v], [total], op["phase"], -1, R.origin)
        out = total
    return out


def _text(x):
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def add_microbatch_gradients(R, node, canonical):
    """A pipelined rank's gradient summed over its micro-batches (a sum pipeline.py
    marks; over its schedule steps too, what .grad held before plus the step's):
    each micro-batch's gradient is a partial sum of the step's over the batch, or
    one term of a sum the step accumulates (the step runs the same micro-batches:
    lowered as its share of that sum), and their sum a local accumulation of those
    (its share is made whole once the collectives are assembled: repair_sum_parts).
    Two at different multiples of the step's (one scaled by the schedule, one not)
    make no multiple of the sum: refuted, class scaled."""
    for x in node.args[:2]:
        if x not in R.completed_terms and x not in R.chains.links and \
                R.image.get(x) is not None and canonical(R.image[x]) in R.S.chain_term:
            R.completed_terms.add(x)
            R.env[x] = lower_rank_chain(R, x, [x], canonical)
    a, b = (R.env[x] for x in node.args[:2])
    if a.claim.scale != b.claim.scale and a.claim.tensor == b.claim.tensor:
        R.doc.failures.append(dict(
            cls="scaled", tensor=R._tensor_name(a.claim.tensor), devices=[R.device],
            message=(f"rank {R.device} adds a micro-batch's gradient of the model's step "
                     f"scaled by {_text(b.claim.scale)} to a sum of others' scaled by "
                     f"{_text(a.claim.scale)}: their sum is no multiple of the step's (a "
                     "schedule that scales what .grad held before its step along with its "
                     "own micro-batches' gradients counts the earlier ones less)"),
            origin=R.origin))
        raise RefutedWhileLowering(R.doc)
    claim = dataclasses.replace(a.claim, part=_union([a.claim.part, b.claim.part]))
    out = R.doc.value(R.device, claim, a.dtype, a.dims)
    R.doc.task(R.device, -1, "accumulate", {}, [a, b], [out],
               R.origin.get("phase", "backward"), -1, R.origin)
    R.image[node] = R.image.get(node.args[0])
    return out
