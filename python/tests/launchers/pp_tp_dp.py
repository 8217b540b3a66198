"""pp2 x dp2 x tp2 (8 ranks): each stage tensor parallel, then FSDP2, under 1F1B over 4
micro-batches. Correct."""

from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2, "dp": 2, "tp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=16)
loss = tiny.hf_loss
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B, tensor_parallel=True,
                          data_parallel=True)
