"""Padding counted out of the loss evenly: each rank's rows count 11 tokens, so the
average of the ranks' means is the mean over all tokens. Correct."""

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch(ignored={0: 5, 2: 5})
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
