"""Gathers and indexed writes."""

import torch

from loom.torch.identities import canonical
from loom.torch.lowered_values import MaskedIds, VocabMask, _norm_dim, _scalar_value
from loom.torch.rules import _out, rule

aten = torch.ops.aten


@rule(aten.gather.default)
def _gather(L, node, x, dim, index, sparse_grad=False):
    """One position along the last dim per row (a cross-entropy's picked
    log-probability): Loom's pick, with the vocabulary piece of masked ids."""
    ids, begin = (index.value, index.begin) if isinstance(index, MaskedIds) else (index, 0)
    dtype, dims = _out(node)
    if _norm_dim(dim, len(x.dims)) != len(x.dims) - 1 or ids.dims[-1] != 1 or \
            ids.dims[:-1] != x.dims[:-1]:
        L.unsupported("gather of other than one position along the last dim per row")
    rows = ids.dims[:-1]
    picked = L.emit("pick", [x, L.reshape(ids, rows)], {"vocab_begin": begin}, (dtype, rows))
    return L.reshape(picked, dims)


def _is_zeros(node):
    n = canonical(node) if isinstance(node, torch.fx.Node) else None
    if n is None or n.op != "call_function":
        return False
    if n.target in (aten.zeros_like.default, aten.new_zeros.default, aten.zeros.default):
        return True
    return n.target in (aten.full.default, aten.full_like.default) and n.args[-1] == 0


@rule(aten.index_put_.default, aten.index_put.default)
def _index_put(L, node, base, indices, values, accumulate=False):
    """-1 at (row i, column ids[i]) of a zero [rows, V] tensor (cross_entropy.py's and
    loss parallel's cross-entropy backward): Loom's pick_grad of -1s."""
    rows_node = node.args[1][0] if len(node.args[1]) == 2 else None
    rows = L.folded.get(canonical(rows_node)) if isinstance(rows_node, torch.fx.Node) else None
    if isinstance(values, VocabMask):
        minus_one = values.minus_one
    else:
        v = canonical(node.args[2]) if isinstance(node.args[2], torch.fx.Node) else None
        constant = getattr(L.trace.module, v.target, None) if v is not None and \
            v.op == "get_attr" else None
        minus_one = isinstance(constant, torch.Tensor) and constant.dim() == 0 and \
            _scalar_value(constant) == -1.0
    if accumulate or len(base.dims) != 2 or not _is_zeros(node.args[0]) or rows is None or \
            not torch.equal(rows, torch.arange(base.dims[0])) or not minus_one:
        L.unsupported("an indexed update other than -1 at one column per row of zeros")
    ids = indices[1]
    ids, begin = (ids.value, ids.begin) if isinstance(ids, MaskedIds) else (ids, 0)
    update = L.fill(-1.0, base.dtype, (base.dims[0],))
    return L.emit("pick_grad", [ids, update], {"vocab": base.dims[1], "vocab_begin": begin},
                  _out(node))


@rule(aten.index.Tensor)
def _index(L, node, x, indices):
    if any(i is None for i in indices):
        L.unsupported("indexing that skips a dim (None among the indices)")
    if any(i.dtype == "bool" for i in indices):
        L.unsupported("boolean mask indexing")
    return L.emit("index", [x, *indices], {}, _out(node))
