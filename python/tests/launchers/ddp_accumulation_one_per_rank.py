"""Gradient accumulation over micro-batches of four rows: two on one device, one on
each of two data-parallel ranks, each loss divided by the number of micro-batches the
process runs, then the data-parallel average. Correct: each rank's gradient is its
share of the step's sum over both micro-batches."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    micro = [dict(zip(batch, rows)) for rows in zip(*(t.split(4) for t in batch.values()))]
    for mb in micro:
        tiny.forward_backward(model, mb, scale=1.0 / len(micro))
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
