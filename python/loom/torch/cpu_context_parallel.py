"""torch's context parallelism on the CPU.

`torch.distributed.tensor.experimental.context_parallel` (and torchtitan's CP, built on
it) routes scaled dot-product attention over sequence-sharded DTensors to its ring
attention (`_templated_ring_attention` and its backward), but only for the GPU
kernels (flash, memory-efficient, cuDNN): on the CPU, SDPA runs
`_scaled_dot_product_flash_attention_for_cpu`, which DTensor has no rule for, and the
job stops. `enable()` gives that kernel and its backward the same ring: torch's own
template (its rotation of keys and values, its load-balanced chunks, its merge of
partial outputs by their log-sum-exp) run over the CPU kernel, so that a CP job runs
on CPU processes under gloo as it runs on GPUs, with the GPU kernel replaced by the
CPU's. The kernels agree on their outputs (the attention and its log-sum-exp).
"""

import torch



def _ops():
    aten = torch.ops.aten
    return (aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_flash_attention_for_cpu_backward.default)


def _forward_kernel(query, key, value, *, is_causal=False, dropout_p=0.0, scale=None):
    # The template calls op(q, k, v, is_causal=..., **kwargs); the CPU kernel returns
    # (out, logsumexp) as the flash kernel does first.
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, scale=scale)


def _backward_kernel(*, grad_out, query, key, value, out, logsumexp, is_causal,
                     dropout_p=0.0, scale=None):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale=scale)


def _handler(op_call, args, kwargs):
    """DTensor's handler of the CPU kernel under context parallelism: the local
    shards through torch's ring, the results as DTensors sharded as the queries."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental._context_parallel import _attention
    forward, _ = _ops()
    mesh, placements = args[0].device_mesh, args[0].placements

    def local(a):
        return a.to_local() if isinstance(a, DTensor) else a
    largs = [local(a) for a in args]
    lkwargs = {k: local(v) for k, v in kwargs.items()}
    if lkwargs.get("attn_mask") is not None:
        raise NotImplementedError("context parallelism with an attention mask: torch's "
                                  "ring attention takes is_causal only")
    seq_dim = 2  # SDPA's (batch, heads, sequence, head_dim), as torch's ring assumes
    if op_call == forward:
        q, k, v = largs[:3]
        dropout_p = largs[3] if len(largs) > 3 else lkwargs.get("dropout_p", 0.0)
        is_causal = largs[4] if len(largs) > 4 else lkwargs.get("is_causal", False)
        results = _attention._templated_ring_attention(
            mesh.get_group(), seq_dim, _forward_kernel, q, k, v, is_causal=is_causal,
            dropout_p=dropout_p, scale=lkwargs.get("scale"))[:2]
    else:
        grad_out, q, k, v, out, lse, dropout_p, is_causal = largs[:8]
        results = _attention._templated_ring_attention_backward(
            mesh.get_group(), seq_dim, _backward_kernel, grad_out, "grad_out", q, k, v, out,
            lse, is_causal, dropout_p=dropout_p, scale=lkwargs.get("scale"))[:3]
    return tuple(DTensor.from_local(r, mesh, placements, run_check=False) for r in results)


def enable():
    """Registers the CPU kernel's ring with torch's context parallelism (once; the
    handlers take effect inside `context_parallel`, as torch's own do)."""
    from torch.distributed.tensor.experimental._context_parallel import _attention
    for op in _ops():
        _attention.custom_ops.setdefault(op, _handler)
