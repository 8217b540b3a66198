"""Hand-written data parallelism in the training step: the gradients all-reduced with
SUM and never divided by the world size, each rank's loss a mean over its own tokens:
twice the model's gradients."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 2.0}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return module


def train_step(model, optimizer, batch):
    loss = tiny.forward_backward(model, batch)
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
    optimizer.step()
    return loss
