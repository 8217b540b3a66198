"""A rank's gradient accumulation as a piece of the step's (accumulation.py): its own
terms where the step has them, zeros for the terms other ranks add, the result
claiming the share of the terms it holds (term k of n: [k/n, (k+1)/n)); a rank
gradient that is one term of a step's chain, read after the rank's backward, as
that share too."""

from loom.torch import claims as C
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
    if None in found or len({last for last, _ in found}) != 1 or len(found) != len(terms):
        R.unsupported("the rank accumulates gradients over its backward calls that are not "
                      "terms of one gradient the model's step accumulates")
    last = next(iter(found))[0]
    spec_terms = S.chains.terms[last]
    index = S.L.node_ops[last][0]
    op = S.g.ops[index]
    held = {p: R.env[t] for (_, p), t in zip((S.chain_term[i] for i in images), terms)}
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
