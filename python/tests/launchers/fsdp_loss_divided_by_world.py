"""The loss divided by the world size while FSDP2 also averages the gradients: half
the model's gradients."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 0.5}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def loss(output):
    return output.loss / dist.get_world_size()


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
