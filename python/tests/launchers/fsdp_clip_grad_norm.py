"""FSDP2, then torch's clip_grad_norm_ over the sharded gradients (DTensors: the norm
is all-reduced), active at 0.05. Correct."""

import torch

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])


def train_step(model, optimizer, batch):
    loss = tiny.forward_backward(model, batch)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05, foreach=False)
    optimizer.step()
    return loss
