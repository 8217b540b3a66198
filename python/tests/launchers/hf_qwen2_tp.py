"""Hugging Face qwen2 at its defaults (its own attention implementation, activation and
norms), tensor parallelism over two ranks, as its own tp_plan splits it. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"tp": 2}
model = tiny.builder(tiny.hf_config("qwen2"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("qwen2", "tp")
