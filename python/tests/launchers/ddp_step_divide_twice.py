"""Hand-written data parallelism that divides by the world size twice: once in the
loss, once after the all-reduce. Half the model's gradients."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 0.5}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    world = dist.get_world_size()
    loss = tiny.forward_backward(model, batch, scale=1.0 / world)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    optimizer.step()
    return loss
