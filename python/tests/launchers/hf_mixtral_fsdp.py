"""Hugging Face Mixtral (its sparse mixture-of-experts block, top 2 of 4 experts),
FSDP2 over two ranks, every block then the root: each data-parallel rank routes its own tokens. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder(tiny.hf_config("mixtral"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("mixtral", "fsdp")
