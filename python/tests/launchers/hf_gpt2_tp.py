"""Hugging Face gpt2 at its defaults (its own attention implementation, activation and
norms), tensor parallelism over two ranks, as its own tp_plan splits it. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"tp": 2}
model = tiny.builder(tiny.hf_config("gpt2"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("gpt2", "tp")
