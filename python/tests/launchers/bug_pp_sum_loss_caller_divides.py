"""torchtitan #2972 (https://github.com/pytorch/torchtitan/issues/2972) as the issue
reports it: under pipeline parallelism the schedule backwards the loss function's
summed cross-entropy, and the division by the batch's count of valid tokens is made
by the caller, after schedule.step, for the logged loss only (scale_grads=False, as
torchtitan builds its schedule). The step without PP divides before backward. GPipe
over two ranks and 4 micro-batches of the 8-row batch (56 counted tokens): the real
run's gradients are 56 times the model's step. (bug_pp_sum_loss_unscaled.py is the
form after torchtitan's fix moved the count into the loss function's arguments.)"""

import torch
from torch.distributed.pipelining import ScheduleGPipe

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "scaled", "factor": 56.0}

mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd

# The batch's count of the tokens the loss counts (Hugging Face's shift, -100),
# counted once before the step as torchtitan's trainer does: 8 rows of 7.
GLOBAL_VALID_TOKENS = int((inputs()["labels"][:, 1:] != -100).sum())


def cross_entropy_loss(logits, labels):
    """torchtitan's loss before its fix: summed over the tokens."""
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted,
                                               ignore_index=-100, reduction="sum")
    return summed


def loss(output, batch):
    """The step without PP: normalised by the tokens before backward."""
    return cross_entropy_loss(output.logits, batch["labels"]) / GLOBAL_VALID_TOKENS


def parallelize(module, device_mesh):
    # The schedule calls loss_fn(output, target): the summed loss, backwarded as it is.
    return tiny.pipelined(module, device_mesh, ScheduleGPipe, loss_fn=cross_entropy_loss,
                          scale_grads=False)
