"""Hugging Face Gemma 2 at its defaults (tanh-approximated gelu, its attention
softcapping and norms), tensor parallelism over two ranks. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"tp": 2}
model = tiny.builder(tiny.hf_config("gemma2"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.tensor_parallel(module, device_mesh["tp"])
