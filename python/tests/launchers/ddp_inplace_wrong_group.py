"""Hand-written data parallelism on a dp x x mesh that all-reduces the gradients over
the wrong group: the "x" ranks, which read the same rows, instead of "dp". The
data-parallel ranks' gradients are never averaged."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"dp": 2, "x": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    module.sync_group = device_mesh["x"].get_group()  # should be device_mesh["dp"]
    return module


def train_step(model, optimizer, batch):
    group = getattr(model, "sync_group", None)  # none on one device: the world of one
    loss = tiny.forward_backward(model, batch)
    for p in model.parameters():
        dist.all_reduce(p.grad, group=group)
        p.grad /= dist.get_world_size(group)
    optimizer.step()
    return loss
