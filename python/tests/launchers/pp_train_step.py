"""A training step that drives the pipeline schedule itself, as torchtitan's trainer
does: the schedule's step on the batch (the first stage given the inputs, the last the
target; the schedule's mean loss per micro-batch, its gradients divided by the
micro-batches, its default), then the optimizer's step; on one device, the model on
the whole batch. Correct."""

from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "proved equivalent"}

mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B)


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    if schedule is None:  # one device
        model(**batch).loss.backward()
    else:
        tiny.schedule_step(schedule, batch)
    optimizer.step()
