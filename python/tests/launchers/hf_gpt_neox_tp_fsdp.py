"""Hugging Face GPT-NeoX at its defaults (the exact, erf-based gelu; rotary embeddings
on a quarter of each head; fused query-key-value projection; parallel attention and
MLP residuals), tensor parallelism inside FSDP2 on a 2 x 2 mesh: the fused projection
split column-wise with its output gathered, the MLP Megatron-style. Correct."""

import transformers
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2, "tp": 2}
model = tiny.builder(transformers.GPTNeoXConfig(
    vocab_size=tiny.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64, use_cache=False,
    attention_dropout=0.0, hidden_dropout=0.0))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    plan = {}
    for i, _ in enumerate(module.gpt_neox.layers):
        p = f"gpt_neox.layers.{i}."
        plan[p + "attention.query_key_value"] = ColwiseParallel(output_layouts=Replicate())
        plan[p + "attention.dense"] = RowwiseParallel(input_layouts=Replicate())
        plan[p + "mlp.dense_h_to_4h"] = ColwiseParallel()
        plan[p + "mlp.dense_4h_to_h"] = RowwiseParallel()
    parallelize_module(module, device_mesh["tp"], plan)
    for layer in module.gpt_neox.layers:
        fully_shard(layer, mesh=device_mesh["dp"])
    fully_shard(module, mesh=device_mesh["dp"])
    return module
