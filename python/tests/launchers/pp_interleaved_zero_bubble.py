"""Interleaved zero bubble over two ranks, two stages each: each backward split into
its input and its weight halves. Correct."""

from torch.distributed.pipelining import ScheduleInterleavedZeroBubble

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2}
model = tiny.builder(tiny.llama_config(num_hidden_layers=4))
inputs = tiny.batch(rows=8)
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, ScheduleInterleavedZeroBubble, stages_per_rank=2)
