"""Padding counted out of the loss (ignore_index) unevenly: rank 0's rows count 16
tokens, rank 1's 6. Each rank's mean over its own tokens, averaged by FSDP, is not
the mean over all 22 tokens."""

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch(ignored={2: 5, 3: 5})
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.fsdp(module, device_mesh["dp"])
