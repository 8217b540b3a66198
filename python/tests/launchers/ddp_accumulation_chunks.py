"""Gradient accumulation over two micro-batches, each half of the rank's rows (on one
device, half of the whole batch's), each loss divided by the number of micro-batches,
then the data-parallel average. Correct: a rank's two micro-batches are the two
halves of one of the step's."""

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
    # A fixed number of micro-batches (a trainer's gradient accumulation steps).
    micro = [dict(zip(batch, rows)) for rows in zip(*(t.chunk(2) for t in batch.values()))]
    for mb in micro:
        tiny.forward_backward(model, mb, scale=1.0 / len(micro))
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
