"""Hand-written data parallelism, then torch's clip_grad_norm_ over the averaged
gradients (active: the norm is above 0.05). Correct."""

import torch
import torch.distributed as dist

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    loss = tiny.forward_backward(model, batch)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05, foreach=False)
    optimizer.step()
    return loss
