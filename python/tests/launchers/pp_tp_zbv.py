"""pp2 x tp2: the V-shaped zero-bubble schedule (stages 0 and 3 on one pipeline rank, 1 and 2 on
the other), two stages per rank, each tensor parallel. Correct."""

from torch.distributed.pipelining import ScheduleZBVZeroBubble

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2, "tp": 2}
model = tiny.builder(tiny.llama_config(num_hidden_layers=4))
inputs = tiny.batch(rows=8)
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, ScheduleZBVZeroBubble, stages_per_rank=2,
                          tensor_parallel=True)
