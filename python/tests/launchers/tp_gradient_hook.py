"""parallelize registers a gradient hook on the final norm's weight that doubles its
gradient (a leftover of a debugging session): the real run's update differs."""

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"tp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    tiny.tensor_parallel(module, device_mesh["tp"])
    module.model.norm.weight.register_hook(lambda g: g * 2)
    return module
