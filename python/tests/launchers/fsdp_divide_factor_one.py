"""FSDP2 told not to divide the gradients (divide factor 1) while each rank's loss is
already a mean over its own tokens: the gradients are summed, twice the model's."""

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 2.0}

mesh = {"dp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    tiny.fsdp(module, device_mesh["dp"])
    for m in module.modules():
        if hasattr(m, "set_gradient_divide_factor"):
            m.set_gradient_divide_factor(1.0)
    return module
