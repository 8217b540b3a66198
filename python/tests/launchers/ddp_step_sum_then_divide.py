"""Hand-written data parallelism in the training step: the gradients all-reduced with
SUM, then divided by the world size. Correct."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    loss = tiny.forward_backward(model, batch)
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= dist.get_world_size()
    optimizer.step()
    return loss
