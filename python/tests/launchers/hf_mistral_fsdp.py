"""Hugging Face mistral at its defaults (its own attention implementation, activation and
norms), FSDP2 over two ranks, every block then the root. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder(tiny.hf_config("mistral"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("mistral", "fsdp")
