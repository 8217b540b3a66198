"""Hugging Face Mistral at its default attention under FSDP2 over two ranks. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder(tiny.hf_config("mistral"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
