"""Hugging Face Qwen3-MoE at its defaults (its own attention implementation, its
sparse MoE block), tensor parallelism over two ranks, with the per-head query and key norms sequence parallel
over the heads dim (their weights' gradients all-reduced, as torchtitan's Qwen3 plan
does). Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"tp": 2}
model = tiny.builder(tiny.hf_config("qwen3_moe"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("qwen3_moe", "tp")
