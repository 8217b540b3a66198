"""Gradient accumulation under pipeline parallelism as torchtitan does it since PR #1732
(https://github.com/pytorch/torchtitan/pull/1732): the trainer calls the schedule's step
once per accumulation step, on that step's piece of the batch, without zeroing the
gradients in between; the schedule leaves its gradients unscaled (scale_grads=False) and
each micro-batch's loss is divided by every micro-batch of the optimizer step (the
accumulation steps times the schedule's micro-batches). GPipe over two ranks, 2
accumulation steps of 8 rows each split into 4 micro-batches of 2 rows; on one device,
each micro-batch's mean loss over the 8 micro-batches. Correct."""

from torch.distributed.pipelining import ScheduleGPipe

import tiny
from loom.torch import hf

EXPECT = {"verdict": "proved equivalent"}

ACCUMULATION = 2   # gradient accumulation steps per optimizer step
MICROBATCHES = 4   # pipeline micro-batches per accumulation step
mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=16)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    base = hf.causal_lm_loss(module)

    def rescaled(logits, labels):
        return base(logits, labels) / (ACCUMULATION * MICROBATCHES)

    return tiny.pipelined(module, device_mesh, ScheduleGPipe, microbatches=MICROBATCHES,
                          loss_fn=rescaled, scale_grads=False)


def _split(batch, parts):
    return [dict(zip(batch, rows)) for rows in zip(*(t.chunk(parts) for t in batch.values()))]


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)   # a pipelined rank's: the one parallelize gave
    for step_batch in _split(batch, ACCUMULATION):
        if schedule is None:
            for mb in _split(step_batch, MICROBATCHES):
                tiny.forward_backward(model, mb, scale=1.0 / (ACCUMULATION * MICROBATCHES))
            continue
        tiny.schedule_step(schedule, step_batch)
    optimizer.step()
