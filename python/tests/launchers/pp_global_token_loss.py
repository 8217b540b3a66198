"""torchtitan's pipeline loss: each micro-batch's summed cross-entropy divided by the
tokens of the whole batch (counted once, before the step), the schedule told not to
scale the gradients (scale_grads=False): their sum over the micro-batches is the
batch's mean. Correct."""

import torch
from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.adamw


# The batch's own count of the tokens it trains on (Hugging Face's shift, -100),
# counted once before the step, as torchtitan's trainer does.
TOKENS = int((inputs()["labels"][:, 1:] != -100).sum())


def _global_token_loss(logits, labels):
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
        ignore_index=-100, reduction="sum") / TOKENS


def loss(output, batch):
    """The model's step: the same loss over the whole batch."""
    return _global_token_loss(output.logits, batch["labels"])


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B, loss_fn=_global_token_loss,
                          scale_grads=False)
