"""torchtitan #2972 (https://github.com/pytorch/torchtitan/issues/2972): under pipeline
parallelism the gradients come out global_valid_tokens times larger than without it.

torchtitan's loss is a cross-entropy summed over the tokens, normalised by the batch's
count of valid tokens. Without PP the trainer normalises before backward. With PP the
schedule calls the loss function on the last stage as loss_fn(output, target) and
backwards what it returns, the summed loss; torchtitan divides the micro-batches'
losses by global_valid_tokens only after schedule.step, for the logged loss, once
backward is done (scale_grads=False, as torchtitan builds its schedule). Here the
normalisation is the loss function's argument, as torchtitan now passes it (its fix
hands global_valid_tokens to the loss through loss_kwargs): the step without PP passes
it, the schedule's call leaves the default, no normalisation. GPipe over two ranks and
4 micro-batches of the 8-row batch (56 counted tokens): the real run's gradients are 56
times the model's step."""

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


def cross_entropy_loss(logits, labels, global_valid_tokens=1):
    """torchtitan's loss: summed over the tokens, normalised by the count it is given."""
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
    summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted,
                                               ignore_index=-100, reduction="sum")
    return summed / global_valid_tokens


def loss(output, batch):
    """The step without PP: normalised by the tokens before backward."""
    return cross_entropy_loss(output.logits, batch["labels"], GLOBAL_VALID_TOKENS)


def parallelize(module, device_mesh):
    # The schedule calls loss_fn(output, target): the summed loss, backwarded as it is.
    return tiny.pipelined(module, device_mesh, ScheduleGPipe, loss_fn=cross_entropy_loss,
                          scale_grads=False)
