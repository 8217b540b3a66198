"""pp2 x tp2: DualPipeV (its V-shaped stages, forward and backward of two micro-batches
overlapped), two stages per rank, each tensor parallel. Correct."""

from torch.distributed.pipelining import ScheduleDualPipeV

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2, "tp": 2}
model = tiny.builder(tiny.llama_config(num_hidden_layers=4))
inputs = tiny.batch(rows=8)
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, ScheduleDualPipeV, stages_per_rank=2,
                          tensor_parallel=True)
