"""Data parallelism through gradient hooks: parallelize registers, on every
parameter, a hook that all-reduces its gradient and divides it by the world size.
Correct."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.adamw


def _average(grad):
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad / dist.get_world_size()


def parallelize(module, device_mesh):
    for p in module.parameters():
        p.register_hook(_average)
    return module
