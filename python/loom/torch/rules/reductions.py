"""Reductions, matrix products, softmax, embeddings, layer norm and the negative
log-likelihood."""

import torch

from loom.torch.lowered_values import MaskedIds, Merged, _norm_dim
from loom.torch.rules import RULES, _out, _out_n, rule

aten = torch.ops.aten


# ---- reductions and matrix products ----------------------------------------------------

def _reduce(kind):
    def lower(L, node, x, dims=None, keepdim=False, dtype=None):
        out_dtype, out_dims = _out(node)
        rank = len(x.dims)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        dims = sorted(_norm_dim(d, rank) for d in dims)
        kept = tuple(s for i, s in enumerate(x.dims) if i not in dims)
        if kind == "sum" and out_dtype in ("i64", "i32"):
            # A count (a sum of bools): Loom sums floats; f64 holds it exactly below 2^53.
            v = L.emit(kind, [L.cast(x, "f64")], {"dims": dims}, ("f64", kept))
            return L.reshape(L.cast(v, out_dtype), out_dims)
        v = L.emit(kind, [L.cast(x, out_dtype)], {"dims": dims}, (out_dtype, kept))
        return L.reshape(v, out_dims)
    return lower


RULES[aten.sum.dim_IntList] = _reduce("sum")
RULES[aten.sum.default] = _reduce("sum")
RULES[aten.mean.dim] = _reduce("mean")
RULES[aten.mean.default] = _reduce("mean")


@rule(aten.cumsum.default)
def _cumsum(L, node, x, dim, dtype=None):
    out_dtype, dims = _out(node)
    return L.emit("cumsum", [L.cast(x, out_dtype)], {"dim": _norm_dim(dim, len(x.dims))},
                  (out_dtype, dims))


@rule(aten.amax.default)
def _amax(L, node, x, dims=(), keepdim=False):
    dtype, out_dims = _out(node)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(dims) != 1:
        L.unsupported(f"amax over {len(dims) or 'all'} dims (Loom's max takes one)")
    dim = _norm_dim(dims[0], len(x.dims))
    kept = tuple(s for i, s in enumerate(x.dims) if i != dim)
    v = L.emit("max", [x], {"dim": dim}, (dtype, kept))
    return L.reshape(v, out_dims)


@rule(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(L, node, a, b):
    if isinstance(a, Merged) and isinstance(b, Merged) and a.lead == b.lead and \
            a.value.dims[:a.lead] == b.value.dims[:b.lead]:
        dtype, _ = _out(node)
        dims = tuple(a.value.dims[:-1]) + (b.value.dims[-1],)
        return Merged(L.emit("matmul", [a.value, b.value], {}, (dtype, dims)), a.lead)
    return L.emit("matmul", [L.merge(a), L.merge(b)], {}, _out(node))


@rule(aten.addmm.default)
def _addmm(L, node, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        L.unsupported(f"addmm with beta={beta}, alpha={alpha}")
    dtype, dims = _out(node)
    prod = L.emit("matmul", [a, b], {}, (dtype, dims))
    return L.emit("add", [prod, bias], {}, (dtype, dims))


def _last_dim(L, x, dim, what):
    if _norm_dim(dim, len(x.dims)) != len(x.dims) - 1:
        L.unsupported(f"{what} over dim {dim}, not the last")


@rule(aten._softmax.default)
def _softmax(L, node, x, dim, half_to_float=False):
    _last_dim(L, x, dim, "softmax")
    return L.emit("softmax", [x], {}, _out(node))


@rule(aten._softmax_backward_data.default)
def _softmax_backward(L, node, dy, y, dim, input_dtype):
    _last_dim(L, y, dim, "softmax backward")
    return L.emit("softmax_grad", [y, dy], {}, _out(node))


@rule(aten._log_softmax.default)
def _log_softmax(L, node, x, dim, half_to_float=False):
    _last_dim(L, x, dim, "log_softmax")
    return L.emit("log_softmax", [x], {}, _out(node))


@rule(aten._log_softmax_backward_data.default)
def _log_softmax_backward(L, node, dy, y, dim, input_dtype):
    _last_dim(L, y, dim, "log_softmax backward")
    return L.emit("log_softmax_grad", [y, dy], {}, _out(node))


@rule(aten.embedding.default)
def _embedding(L, node, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if isinstance(ids, MaskedIds):
        return L.emit("embedding", [ids.value, weight], {"vocab_begin": ids.begin}, _out(node))
    return L.emit("embedding", [ids, weight], {}, _out(node))


@rule(aten.embedding_dense_backward.default)
def _embedding_backward(L, node, dy, ids, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        L.unsupported("embedding backward with frequency scaling")
    value = ids.value if isinstance(ids, MaskedIds) else ids
    if padding_idx is not None and padding_idx >= 0:
        # The padding row gets no gradient: its ids are taken as -1, which no row
        # (and no vocabulary piece) holds, so Loom's embedding_grad leaves them out.
        pad = L.emit("compare", [value, L.fill(padding_idx, value.dtype)], {"op": "eq"},
                     ("bool", value.dims))
        value = L.emit("where", [pad, L.fill(-1, value.dtype, value.dims), value], {},
                       (value.dtype, value.dims))
    if isinstance(ids, MaskedIds) or value is not ids:
        # With vocab_begin, ids outside the table's rows are dropped, not an error.
        begin = ids.begin if isinstance(ids, MaskedIds) else 0
        return L.emit("embedding_grad", [value, dy],
                      {"vocab": int(num_weights), "vocab_begin": begin}, _out(node))
    return L.emit("embedding_grad", [value, dy], {"vocab": int(num_weights)}, _out(node))


@rule(aten.native_layer_norm.default)
def _layer_norm(L, node, x, normalized_shape, weight, bias, eps):
    if len(normalized_shape) != 1 or weight is None or bias is None:
        L.unsupported("layer_norm over more than the last dim, or without weight and bias")
    y = L.emit("layernorm", [x, weight, bias], {"eps": float(eps)}, _out_n(node, 0))
    return [y, ("layer_norm_stat", node, eps), ("layer_norm_stat", node, eps)]


@rule(aten.native_layer_norm_backward.default)
def _layer_norm_backward(L, node, dy, x, normalized_shape, mean, rstd, weight, bias, mask):
    if not (isinstance(mean, tuple) and mean[0] == "layer_norm_stat"):
        L.unsupported("layer_norm backward of statistics not from native_layer_norm")
    eps = mean[2]
    outs = [_out_n(node, i) for i in range(3)]
    return L.emit_n("layernorm_grad", [x, weight, dy], {"eps": float(eps)}, outs)


@rule(aten.nll_loss_forward.default)
def _nll_loss(L, node, logp, target, weight, reduction, ignore_index):
    if weight is not None:
        L.unsupported("nll_loss with class weights")
    dtype = logp.dtype
    vocab = logp.dims[-1]
    picked = L.emit("pick", [logp, target], {"vocab_begin": 0}, (dtype, target.dims))
    valid = L.emit("compare", [target, L.fill(ignore_index, target.dtype)], {"op": "ne"},
                   ("bool", target.dims))
    count = L.emit("sum", [L.cast(valid, dtype)], {"dims": list(range(len(target.dims)))},
                   (dtype, ()))
    if reduction == 0:
        loss = L.emit("neg", [picked], {}, (dtype, target.dims))
    else:
        total = L.emit("sum", [picked], {"dims": list(range(len(target.dims)))}, (dtype, ()))
        if reduction == 1:
            total = L.emit("div", [total, count], {}, (dtype, ()))
        loss = L.emit("neg", [total], {}, (dtype, ()), hint=node.name)
    del vocab
    return [loss, count]


@rule(aten.nll_loss_backward.default)
def _nll_loss_backward(L, node, dloss, logp, target, weight, reduction, ignore_index,
                       total_weight):
    if weight is not None:
        L.unsupported("nll_loss backward with class weights")
    dtype = logp.dtype
    g = L.emit("neg", [dloss], {}, (dtype, dloss.dims))
    if reduction == 1:
        g = L.emit("div", [g, total_weight], {}, (dtype, dloss.dims))
    if g.dims != target.dims:
        g = _expand_to(L, g, target.dims)
    return L.emit("pick_grad", [target, g], {"vocab": logp.dims[-1], "vocab_begin": 0},
                  _out(node))


def _expand_to(L, v, dims):
    v = L.reshape(v, (1,) * (len(dims) - len(v.dims)) + tuple(v.dims))
    for d in range(len(dims)):
        if L.decide(v.dims[d] != dims[d]):
            new = list(v.dims)
            new[d] = dims[d]
            v = L.emit("expand", [v], {"dim": d, "size": dims[d]}, (v.dtype, tuple(new)))
    return v
