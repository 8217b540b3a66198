"""Scaled dot-product attention and its backward, in every kernel torch dispatches
F.scaled_dot_product_attention to: the CPU's flash kernel, and on GPUs the flash,
memory-efficient and cuDNN kernels (their random-number state and sequence-length
outputs carry nothing without dropout; Loom refuses dropout)."""

import math

import torch

from loom.torch.identities import canonical
from loom.torch.rules import _out_n, rule

aten = torch.ops.aten


# ---- scaled dot-product attention ----------------------------------------------------



def _heads_second(L, x):
    """[b, h, s, d] (torch's layout) <-> [b, s, h, d] (Loom's attention's)."""
    b, h, s, d = x.dims
    return L.emit("transpose", [x], {"perm": [0, 2, 1, 3]}, (x.dtype, (b, s, h, d)),
                  hint=f"{L.current.name}.heads")


def _mask_is_causal(L, mask_node, s, t):
    """Whether an attention mask the program computed from shapes alone (folded:
    constants.py) is the causal one: True (bool) or 0 (additive) exactly where key j
    <= query i, for every batch row and head it broadcasts over."""
    node = canonical(mask_node) if isinstance(mask_node, torch.fx.Node) else None
    value = L.folded.get(node) if node is not None else None
    if value is None or value.dim() < 2 or tuple(value.shape[-2:]) != (s, t) or s != t:
        return False
    causal = torch.ones(s, t, dtype=torch.bool).tril()
    if value.dtype == torch.bool:
        return bool((value == causal).all())
    return bool(((value == 0) == causal).all()) and bool(torch.isinf(value[..., ~causal]).all())


def _arg_node(node, position, name):
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name)


def _attention_attrs(L, mask_node, q, k, dropout_p, is_causal, attn_mask, scale):
    if dropout_p:
        L.unsupported(f"attention with dropout {dropout_p} (a random mask no proof covers)")
    if attn_mask is not None:
        # A mask computed from shapes alone is a constant: the causal one is causal
        # attention (Hugging Face passes it rather than is_causal).
        if is_causal or not _mask_is_causal(L, mask_node, q.dims[-2], k.dims[-2]):
            L.unsupported("attention with a mask other than the causal one (Loom's attention "
                          "is causal or full)")
        is_causal = True
    d = q.dims[-1]
    return {"causal": int(bool(is_causal)),
            "scale": float(scale) if scale is not None else 1.0 / math.sqrt(d)}


def _lse_dtype(dtype):
    """The dtype of attention's log-sum-exp: float32 for 16-bit inputs (as torch's
    and Loom's kernels keep it)."""
    return "f32" if dtype in ("bf16", "f16") else dtype


def _attention(L, node, q, k, v, attrs):
    """Loom's attention on torch's [b, h, s, d] operands (GQA when q has more heads
    than k and v): the output and each query row's log-sum-exp, in torch's layouts
    ([b, h, s, dv] and [b, h, s]; a GPU kernel's padding of the latter is left out:
    only the backward reads it)."""
    dtype, dims = _out_n(node, 0)
    b, h, s, dv = dims
    lse_dtype = _lse_dtype(dtype)
    out, lse = L.emit_n("attention",
                        [_heads_second(L, q), _heads_second(L, k), _heads_second(L, v)], attrs,
                        [(dtype, (b, s, h, dv)), (lse_dtype, (b, s, h))])
    o = L.emit("transpose", [out], {"perm": [0, 2, 1, 3]}, (dtype, dims))
    stats = L.emit("transpose", [lse], {"perm": [0, 2, 1]}, (lse_dtype, (b, h, s)),
                   hint=f"{L.current.name}.lse")
    return [o, stats]


def _attention_grad(L, node, dout, q, k, v, out, logsumexp, attrs):
    """The backward from the forward's output and log-sum-exp, as torch's kernels
    compute it."""
    b, h, s, _ = q.dims
    if logsumexp.dims != (b, h, s):
        L.unsupported(f"an attention backward whose log-sum-exp has dims {logsumexp.dims}, "
                      f"not the queries' {(b, h, s)}")
    qs, ks, vs, os_, ds = (_heads_second(L, x) for x in (q, k, v, out, dout))
    lse = L.emit("transpose", [logsumexp], {"perm": [0, 2, 1]}, (logsumexp.dtype, (b, s, h)),
                 hint=f"{L.current.name}.lse")
    grads = L.emit_n("attention_grad", [qs, ks, vs, os_, lse, ds], attrs,
                     [(qs.dtype, qs.dims), (ks.dtype, ks.dims), (vs.dtype, vs.dims)])
    return [L.emit("transpose", [g], {"perm": [0, 2, 1, 3]}, _out_n(node, i))
            for i, g in enumerate(grads)]


def _unused(node, count):
    """Outputs no op reads without dropout (random-number state, sequence lengths)."""
    return [("attention_unused", node)] * count


@rule(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa(L, node, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """The CPU's kernel, an attention mask optional."""
    attrs = _attention_attrs(L, _arg_node(node, 5, "attn_mask"), q, k, dropout_p, is_causal,
                             attn_mask, scale)
    return _attention(L, node, q, k, v, attrs)


@rule(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_backward(L, node, dout, q, k, v, out, logsumexp, dropout_p=0.0, is_causal=False,
                   attn_mask=None, scale=None):
    attrs = _attention_attrs(L, _arg_node(node, 8, "attn_mask"), q, k, dropout_p, is_causal,
                             attn_mask, scale)
    return _attention_grad(L, node, dout, q, k, v, out, logsumexp, attrs)


@rule(aten._scaled_dot_product_flash_attention.default)
def _sdpa_flash(L, node, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                scale=None):
    """The GPU's flash kernel: no mask."""
    attrs = _attention_attrs(L, None, q, k, dropout_p, is_causal, None, scale)
    return _attention(L, node, q, k, v, attrs) + _unused(node, 7)


@rule(aten._scaled_dot_product_flash_attention_backward.default)
def _sdpa_flash_backward(L, node, dout, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                         max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=None):
    attrs = _attention_attrs(L, None, q, k, dropout_p, is_causal, None, scale)
    return _attention_grad(L, node, dout, q, k, v, out, logsumexp, attrs)


@rule(aten._scaled_dot_product_efficient_attention.default,
      aten._scaled_dot_product_cudnn_attention.default)
def _sdpa_efficient(L, node, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0,
                    is_causal=False, return_debug_mask=False, scale=None):
    """The GPU's memory-efficient and cuDNN kernels: an additive bias optional."""
    attrs = _attention_attrs(L, _arg_node(node, 3, "attn_bias"), q, k, dropout_p, is_causal,
                             attn_bias, scale)
    extra = 2 if node.target is aten._scaled_dot_product_efficient_attention.default else 7
    return _attention(L, node, q, k, v, attrs) + _unused(node, extra)


@rule(aten._scaled_dot_product_efficient_attention_backward.default)
def _sdpa_efficient_backward(L, node, dout, q, k, v, attn_bias, out, logsumexp, philox_seed,
                             philox_offset, dropout_p, grad_input_mask, is_causal=False,
                             scale=None):
    attrs = _attention_attrs(L, _arg_node(node, 4, "attn_bias"), q, k, dropout_p, is_causal,
                             attn_bias, scale)
    if len(grad_input_mask) > 3 and grad_input_mask[3]:
        L.unsupported("the gradient of an attention bias (Loom's attention takes none)")
    return _attention_grad(L, node, dout, q, k, v, out, logsumexp, attrs) + _unused(node, 1)


@rule(aten._scaled_dot_product_cudnn_attention_backward.default)
def _sdpa_cudnn_backward(L, node, dout, q, k, v, out, logsumexp, philox_seed, philox_offset,
                         attn_bias, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                         scale=None):
    attrs = _attention_attrs(L, _arg_node(node, 8, "attn_bias"), q, k, dropout_p, is_causal,
                             attn_bias, scale)
    return _attention_grad(L, node, dout, q, k, v, out, logsumexp, attrs)
