"""Hugging Face Qwen2 at its default attention: tensor parallelism inside FSDP2,
dp2 x tp2 (torchtitan's order). Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2, "tp": 2}
model = tiny.builder(tiny.hf_config("qwen2"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    tiny.tensor_parallel(module, device_mesh["tp"])
    return tiny.fsdp(module, device_mesh["dp"])
