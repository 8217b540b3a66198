"""torchtitan #1733 (https://github.com/pytorch/torchtitan/issues/1733, fixed by PR #1732):
gradient accumulation under pipeline parallelism with the schedule's scale_grads=True
(its default) turns the accumulated gradient into a moving average.

At the end of every schedule.step() a schedule with scale_grads=True divides every
parameter's .grad by the number of micro-batches. With gradient accumulation the
trainer calls step() once per accumulation step without zeroing the gradients in
between (its loss already divided by the accumulation steps), so the gradient
accumulated by the earlier steps is divided again at each later one: with 2
accumulation steps of 4 micro-batches, (g1 / 4 + g2) / 4 where the step on one device
computes (g1 + g2) / 4. Here: GPipe over two ranks, 2 accumulation steps of 8 rows each
split into 4 micro-batches of 2 rows. In the real run every gradient differs from the
model's step (the first half of the batch counts 4 times less than the second)."""

from torch.distributed.pipelining import ScheduleGPipe

import tiny
from loom.torch import hf

EXPECT = {"verdict": "not equivalent"}

ACCUMULATION = 2   # gradient accumulation steps per optimizer step
MICROBATCHES = 4   # pipeline micro-batches per accumulation step
mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=16)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    base = hf.causal_lm_loss(module)

    def rescaled(logits, labels):
        # torchtitan's rescale_accumulated_loss: each loss divided by the steps.
        return base(logits, labels) / ACCUMULATION

    return tiny.pipelined(module, device_mesh, ScheduleGPipe, microbatches=MICROBATCHES,
                          loss_fn=rescaled, scale_grads=True)


def _split(batch, parts):
    return [dict(zip(batch, rows)) for rows in zip(*(t.chunk(parts) for t in batch.values()))]


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)   # a pipelined rank's: the one parallelize gave
    for step_batch in _split(batch, ACCUMULATION):
        if schedule is None:
            # The step on one device: each micro-batch's mean loss over the micro-batches
            # of every accumulation step.
            for mb in _split(step_batch, MICROBATCHES):
                tiny.forward_backward(model, mb, scale=1.0 / (ACCUMULATION * MICROBATCHES))
            continue
        kwargs = {"input_ids": step_batch["input_ids"]} if schedule._stage.is_first else {}
        target = step_batch["labels"] if schedule._stage.is_last else None
        schedule.step(**kwargs, target=target, losses=[] if schedule._stage.is_last else None)
    optimizer.step()
