"""Hugging Face Qwen3-MoE, tensor parallelism over two ranks split Megatron-style with
nothing for its per-head query and key norms (q_norm, k_norm over the head dim). A rank
holds half the heads, so each norm weight's gradient is a partial sum over the rank's
heads that nothing all-reduces (the weights are plain replicated parameters): the
ranks' norm weights drift apart (Megatron-LM #1446's class, on per-head norms)."""

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "missing_reduction"}

mesh = {"tp": 2}
model = tiny.builder(tiny.hf_config("qwen3_moe"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("qwen3_moe", "tp", qk_norms=False)
