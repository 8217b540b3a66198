"""Megatron-style tensor parallelism of every block over two ranks. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"tp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.tensor_parallel(module, device_mesh["tp"])
