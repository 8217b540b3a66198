"""The torchtitan-style Llama (titan_llama.py: complex rotary embeddings) under FSDP2 on
two ranks, its trainer's step. Correct."""

import torch

import tiny
import titan_llama

EXPECT = {"verdict": "proved equivalent"}
TOLERANCE = 1e-5  # the rotary embedding computes in float32, as torchtitan's does

mesh = {"dp": 2}
model = titan_llama.builder()
inputs = titan_llama.batch()
optimizer = tiny.adamw
train_step = titan_llama.train_step


def parallelize(module, device_mesh):
    from torch.distributed.fsdp import fully_shard
    for block in module.layers.values():
        fully_shard(block, mesh=device_mesh["dp"])
    fully_shard(module, mesh=device_mesh["dp"])
    return module
