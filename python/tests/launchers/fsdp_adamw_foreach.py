"""FSDP2 with AdamW's foreach implementation (what torch picks on GPUs). Correct."""

import torch

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss


def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=True)


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
