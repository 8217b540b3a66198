"""Views, copies and re-labels, slices, concatenations and splits, pads."""

import torch

from loom.torch.lowered_values import Empty, Merged, _norm_dim
from loom.torch.rules import _out, rule
from loom.torch.rules.fills import _fill_like

aten = torch.ops.aten


@rule(aten.detach.default, aten.alias.default, aten.clone.default, aten.lift_fresh_copy.default,
      aten.contiguous.default, aten.lift_fresh.default)
def _identity(L, node, x, *args, **kwargs):
    return x


@rule(aten._to_copy.default)
def _to_copy(L, node, x, **kwargs):
    dtype, dims = _out(node)
    return L.cast(x, dtype)


@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
      aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
      aten.flatten.using_ints)
def _view(L, node, x, *args, **kwargs):
    dtype, dims = _out(node)
    if isinstance(x, Merged):
        if L.decide(tuple(x.value.dims) == tuple(dims)):
            return x.value  # the view back of a batched matmul's result
        x = L.merge(x)
    if node.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        lead = len(x.dims) - 2
        merged = 1
        for d in x.dims[:max(lead, 0)]:
            merged *= d
        if L.decide(lead >= 2 and tuple(dims) == (merged,) + tuple(x.dims[lead:])):
            return Merged(x, lead)
    return L.reshape(x, dims)


@rule(aten.t.default)
def _t(L, node, x):
    if len(x.dims) < 2:
        return x
    dtype, dims = _out(node)
    return L.emit("transpose", [x], {"perm": [1, 0]}, (dtype, dims))


@rule(aten.transpose.int)
def _transpose(L, node, x, d0, d1):
    if isinstance(x, Merged):
        rank = len(x.dims)
        d0, d1 = _norm_dim(d0, rank), _norm_dim(d1, rank)
        if min(d0, d1) >= 1:
            inner = x.value
            shift = x.lead - 1
            perm = list(range(len(inner.dims)))
            perm[d0 + shift], perm[d1 + shift] = perm[d1 + shift], perm[d0 + shift]
            dims = list(inner.dims)
            dims[d0 + shift], dims[d1 + shift] = dims[d1 + shift], dims[d0 + shift]
            out = L.emit("transpose", [inner], {"perm": perm}, (inner.dtype, tuple(dims)))
            return Merged(out, x.lead)
        x = L.merge(x)
    rank = len(x.dims)
    d0, d1 = _norm_dim(d0, rank), _norm_dim(d1, rank)
    if d0 == d1:
        return x
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return L.emit("transpose", [x], {"perm": perm}, _out(node))


@rule(aten.permute.default)
def _permute(L, node, x, dims):
    perm = [_norm_dim(d, len(x.dims)) for d in dims]
    if perm == list(range(len(x.dims))):
        return x
    return L.emit("transpose", [x], {"perm": perm}, _out(node))


@rule(aten.expand.default)
def _expand(L, node, x, sizes, **kwargs):
    dtype, dims = _out(node)
    rank = len(dims)
    v = L.reshape(x, (1,) * (rank - len(x.dims)) + tuple(x.dims))
    for d in range(rank):
        if L.decide(v.dims[d] != dims[d]):
            if v.dims[d] != 1:
                L.unsupported(f"expand of dim {d} from {v.dims[d]} to {dims[d]}")
            new = list(v.dims)
            new[d] = dims[d]
            v = L.emit("expand", [v], {"dim": d, "size": dims[d]}, (dtype, tuple(new)))
    return v


def _slice_bounds(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@rule(aten.slice.Tensor)
def _slice(L, node, x, dim=0, start=None, end=None, step=1):
    d = _norm_dim(dim, len(x.dims))
    b, e, step = _slice_bounds(x.dims[d], start, end, step)
    if step != 1:
        L.unsupported(f"slice with step {step}")
    if e <= b:
        return Empty(*_out(node))
    if not L.decide(b != 0 or e != x.dims[d]):
        return x
    return L.emit("slice", [x], {"dim": d, "begin": b, "end": e}, _out(node))


@rule(aten.select.int)
def _select(L, node, x, dim, index):
    d = _norm_dim(dim, len(x.dims))
    i = index + x.dims[d] if index < 0 else index
    dims = list(x.dims)
    dims[d] = 1
    piece = x
    if L.decide(x.dims[d] != 1):
        piece = L.emit("slice", [x], {"dim": d, "begin": i, "end": i + 1},
                       (x.dtype, tuple(dims)))
    return L.reshape(piece, _out(node)[1])


@rule(aten.cat.default)
def _cat(L, node, tensors, dim=0):
    parts = [t for t in tensors if not isinstance(t, Empty) and 0 not in t.dims]
    dtype, dims = _out(node)
    parts = [L.cast(p, dtype) for p in parts]
    if not L.decide(len(parts) != 1):
        return parts[0]
    d = _norm_dim(dim, len(dims))
    return L.emit("concat", parts, {"dim": d}, (dtype, dims))


@rule(aten.stack.default)
def _stack(L, node, tensors, dim=0):
    dtype, dims = _out(node)
    d = _norm_dim(dim, len(dims))
    parts = []
    for t in tensors:
        shape = list(t.dims)
        shape.insert(d, 1)
        parts.append(L.reshape(L.cast(t, dtype), shape))
    if not L.decide(len(parts) != 1):
        return parts[0]
    return L.emit("concat", parts, {"dim": d}, (dtype, dims))


@rule(aten.split.Tensor, aten.split_with_sizes.default)
def _split(L, node, x, split, dim=0):
    d = _norm_dim(dim, len(x.dims))
    size = x.dims[d]
    if isinstance(split, int):
        sizes = [split] * (size // split) + ([size % split] if size % split else [])
    else:
        sizes = list(split)
    if not L.decide(len(sizes) != 1):
        return [x]
    outs = []
    for s in sizes:
        dims = list(x.dims)
        dims[d] = s
        outs.append((x.dtype, tuple(dims)))
    return L.emit_n("split", [x], {"dim": d, "sizes": sizes}, outs)


@rule(aten.select_backward.default)
def _select_backward(L, node, grad, input_sizes, dim, index):
    dtype, dims = _out(node)
    d = _norm_dim(dim, len(dims))
    i = index + dims[d] if index < 0 else index
    shape = list(grad.dims)
    shape.insert(d, 1)
    v = L.reshape(grad, shape)
    return L.emit("pad", [v], {"dim": d, "before": i, "after": dims[d] - i - 1}, _out(node))


@rule(aten.slice_backward.default)
def _slice_backward(L, node, grad, input_sizes, dim, start, end, step):
    d = _norm_dim(dim, len(input_sizes))
    b, e, step = _slice_bounds(input_sizes[d], start, end, step)
    if step != 1:
        L.unsupported(f"slice_backward with step {step}")
    before, after = b, input_sizes[d] - e
    if isinstance(grad, Empty):
        return _fill_like(L, node, 0.0)
    if not L.decide(before != 0 or after != 0):
        return grad
    return L.emit("pad", [grad], {"dim": d, "before": before, "after": after}, _out(node))


@rule(aten.constant_pad_nd.default)
def _constant_pad(L, node, x, pad, value=0):
    """Zeros are Loom's pad; another value is the tensor joined with filled pieces."""
    v = x
    rank = len(x.dims)
    for k in range(len(pad) // 2):
        d = rank - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        if before < 0 or after < 0:
            L.unsupported("constant_pad_nd with a negative pad")
        if not L.decide(before != 0 or after != 0):
            continue
        dims = list(v.dims)
        dims[d] += before + after
        if value == 0:
            v = L.emit("pad", [v], {"dim": d, "before": before, "after": after},
                       (v.dtype, tuple(dims)))
            continue
        parts = []
        for size in (before, after):
            piece = list(v.dims)
            piece[d] = size
            parts.append(L.fill(value, v.dtype, piece) if size else None)
        joined = [p for p in (parts[0], v, parts[1]) if p is not None]
        v = L.emit("concat", joined, {"dim": d}, (v.dtype, tuple(dims)))
    return v


@rule(torch.ops.profiler._record_function_enter_new.default,
      torch.ops.profiler._record_function_exit._RecordFunction)
def _profiler(L, node, *args, **kwargs):
    return None
