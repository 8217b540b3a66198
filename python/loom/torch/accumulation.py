"""Gradients accumulated over a training step's backward calls.

A step that calls backward() more than once (a micro-batch loop: gradient
accumulation) has autograd add each call's gradient into `.grad` in place: a
parameter's gradient is the chain g0, g0 += g1, g0 += g2, ... On one device the
model's step runs every micro-batch of the batch; a data-parallel rank runs those of
its own rows, some of the step's (a loop over micro-batches of a fixed size runs
fewer on a rank than on one device), and the ranks' sums are summed afterwards.

The step's chain is therefore lowered as one `accumulate` of its terms, in order
(here); a rank's chain as a piece of it (rank_accumulation.py): its own terms where
the step has them, zeros (a fill claiming no share) for the terms other ranks add,
the result claiming the share of the terms it holds (term k of n: [k/n, (k+1)/n)).
A later sum over the ranks must complete it: the verifier checks that the shares
meet once, in full. A rank whose terms are not terms of one chain of the step's is
refused, never guessed.
"""

import torch

aten = torch.ops.aten


def _is_link(node):
    """An in-place add of one gradient into another in the backward (autograd's
    accumulation into `.grad`)."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and
            node.target is aten.add_.Tensor and len(node.args) == 2 and not node.kwargs and
            all(isinstance(a, torch.fx.Node) for a in node.args) and
            (node.meta.get("custom") or {}).get("phase") == "backward"):
        return False
    a, b = (x.meta.get("val") for x in node.args)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
        a.shape == b.shape and a.dtype == b.dtype


def _continued(link):
    """The link that adds to `link`'s result, where nothing else reads it; or None."""
    if len(link.users) != 1:
        return None
    (user,) = link.users
    return user if _is_link(user) and user.args[0] is link else None


class Chains:
    """The accumulation chains of a graph: `terms[last link]` its terms in order,
    `inner` the links a later link of their chain continues."""

    def __init__(self, graph):
        self.terms = {}
        self.inner = set()
        self.links = set()
        for node in graph.nodes:
            if not _is_link(node):
                continue
            first = node.args[0]
            if _is_link(first) and _continued(first) is node:
                continue  # not the chain's first link
            terms = [first, node.args[1]]
            last = node
            while _continued(last) is not None:
                self.inner.add(last)
                last = _continued(last)
                terms.append(last.args[1])
            self.terms[last] = terms
            self.links |= self.inner | {last}


def lower_step_chain(L, terms, out):
    """The step's chain of `terms`: one accumulate of them, in order, of type `out`
    ((dtype, dims) of the chain's last link)."""
    values = [L.merge(L.env[t]) for t in terms]
    return L.emit("accumulate", values, {}, out)
