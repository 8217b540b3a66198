"""Hugging Face gemma2 at its defaults (its own attention implementation, activation and
norms), tensor parallelism inside FSDP2, dp2 x tp2 (torchtitan's order), as its own tp_plan splits it. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}
# Gemma 2's norms compute in float32 whatever the model's dtype: the runs agree to
# float32's precision.
TOLERANCE = 1e-5

mesh = {"dp": 2, "tp": 2}
model = tiny.builder(tiny.hf_config("gemma2"))
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw
parallelize = tiny.family_parallelize("gemma2", "tp_fsdp")
