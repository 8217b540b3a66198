"""Gradient accumulation over two micro-batches, each half of the rank's rows (on one
device, half of the whole batch's), each micro-batch's mean loss divided by the number
of micro-batches, then the data-parallel average; padding counted out of the loss
(ignore_index) in rows 1 and 5 only. Wrong: on one device a micro-batch's mean runs
over the tokens of four rows, on a rank over two rows' that count differently, so a
rank weighs its two halves alike where the step weighs them by their tokens. The bug
class of ml-explore/mlx-lm PR #1413 (https://github.com/ml-explore/mlx-lm/pull/1413):
per-micro-batch token means averaged where micro-batches count different tokens; here
it makes the data-parallel run differ from the same train_step on one device."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8, ignored={1: 6, 5: 6})
optimizer = tiny.adamw


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    micro = [dict(zip(batch, rows)) for rows in zip(*(t.chunk(2) for t in batch.values()))]
    for mb in micro:
        tiny.forward_backward(model, mb, scale=1.0 / len(micro))
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
