"""Gradient accumulation over micro-batches of two rows, each loss a mean over its
micro-batch, never divided by the number of micro-batches: on two data-parallel ranks
the gradients are twice the mean's, on one device four times (the data-parallel
average itself is right)."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 0.5}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    # Micro-batches of two rows, as many as the rank's batch holds (a trainer's
    # gradient accumulation: the global batch over data parallelism and micro-batches).
    micro = [dict(zip(batch, rows)) for rows in zip(*(t.split(2) for t in batch.values()))]
    for mb in micro:
        tiny.forward_backward(model, mb)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
