"""Data parallelism through post-accumulate-grad hooks, as DDP-like wrappers write it:
once a parameter's gradient is accumulated, it is all-reduced in place and divided by
the world size. Correct."""

import torch.distributed as dist

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.sgd


def _sync(param):
    dist.all_reduce(param.grad)
    param.grad.div_(dist.get_world_size())


def parallelize(module, device_mesh):
    for p in module.parameters():
        p.register_post_accumulate_grad_hook(_sync)
    return module
