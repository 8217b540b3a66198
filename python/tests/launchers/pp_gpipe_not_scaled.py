"""GPipe over two ranks and 4 micro-batches with scale_grads=False while each
micro-batch's loss is a mean over its own tokens: the gradients are the sum of 4 means,
4 times the batch's mean (torchtitan #1733's class)."""

from torch.distributed.pipelining import ScheduleGPipe

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 4.0}

mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, ScheduleGPipe, scale_grads=False)
