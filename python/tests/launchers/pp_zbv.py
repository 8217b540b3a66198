"""The V-shaped zero-bubble schedule over two ranks (stages 0 and 3 on rank 0, 1 and 2
on rank 1). Correct."""

from torch.distributed.pipelining import ScheduleZBVZeroBubble

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2}
model = tiny.builder(tiny.llama_config(num_hidden_layers=4))
inputs = tiny.batch(rows=8)
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, ScheduleZBVZeroBubble, stages_per_rank=2)
