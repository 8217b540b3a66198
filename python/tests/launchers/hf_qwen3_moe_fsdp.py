"""Hugging Face qwen3_moe at its defaults (its own attention implementation, activation and
norms), FSDP2 over two ranks, every block then the root. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder(tiny.hf_config("qwen3_moe"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("qwen3_moe", "fsdp")
