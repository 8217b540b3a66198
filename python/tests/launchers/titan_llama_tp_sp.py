"""The torchtitan-style Llama (titan_llama.py: complex rotary embeddings) under
torchtitan's own tensor and sequence parallelism plan, the blocks handing each other
local tensors (use_local_output, its default), its trainer's step. Correct."""

import tiny
import titan_llama

EXPECT = {"verdict": "proved equivalent"}
TOLERANCE = 1e-5  # the rotary embedding computes in float32, as torchtitan's does

mesh = {"tp": 2}
model = titan_llama.builder()
inputs = titan_llama.batch()
optimizer = tiny.adamw
train_step = titan_llama.train_step


def parallelize(module, device_mesh):
    return titan_llama.apply_tp(module, device_mesh["tp"])
