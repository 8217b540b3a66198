"""Megatron-LM #1446 (https://github.com/NVIDIA/Megatron-LM/issues/1446): with tensor
and sequence parallelism both on, final_layernorm's gradients differ across the TP ranks
before optimizer.step().

Under sequence parallelism the residual stream between blocks is split along the
sequence over the TP ranks, and every norm on it computes on the rank's own tokens: the
gradient of its replicated weight is the rank's partial sum over those tokens, which
must be all-reduced over the TP group (Megatron's allreduce of sequence-parallel norm
grads; torch's SequenceParallel style does it through DTensor). Here a torchtitan-style
TP + SP plan (vocabulary-split embedding scattering the sequence, SequenceParallel block
norms, attention and MLP inputs gathered, outputs reduce-scattered, the LM head
gathering the sequence) hands the final norm, model.norm, the rank's local half of the
sequence (PrepareModuleInput(..., use_local_output=True) in place of SequenceParallel):
it runs as Megatron's final_layernorm did, a plain norm whose nn.Parameter weight is
outside the sequence-parallel gradient reduction, and nothing sums its gradient. In the
real run each rank's gradient of the final norm weight is the sum over its own half of
the tokens: the two ranks' copies disagree, and both differ from the model's step."""

from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "missing_reduction"}

mesh = {"tp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    tp = device_mesh["tp"]
    parallelize_module(module, tp, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False),
        # The bug: the final norm on the rank's local tokens with a plain weight, where
        # SequenceParallel() would have made its weight's gradient a sum over the ranks.
        "model.norm": PrepareModuleInput(input_layouts=(Shard(1),),
                                         desired_input_layouts=(Shard(1),),
                                         use_local_output=True),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for layer in module.model.layers:
        parallelize_module(layer, tp, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={"hidden_states":
                                                                         Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
    return module
