"""parallelize freezes the first block's MLP (requires_grad=False) after splitting the
blocks over two tensor-parallel ranks: the real run never updates it, the model's
step does."""

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"tp": 2}
model = tiny.builder()
inputs = tiny.batch()
loss = tiny.hf_loss
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    tiny.tensor_parallel(module, device_mesh["tp"])
    for p in module.model.layers[0].mlp.parameters():
        p.requires_grad_(False)
    return module
