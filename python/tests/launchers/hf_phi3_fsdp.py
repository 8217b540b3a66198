"""Hugging Face Phi-3 at its defaults (an embedding with a padding index, fused
projections), FSDP2 over two ranks. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder(tiny.hf_config("phi3"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
