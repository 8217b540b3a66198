"""A training step that drives the pipeline schedule (pp_train_step.py) and then
divides every gradient by the micro-batches again, where the schedule, scaling its
gradients (its default), divided them already: the gradients are a quarter of the
step's (four micro-batches)."""

from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "not equivalent", "factor": 0.25}

mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B)


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    params = list(model.parameters())
    if schedule is None:  # one device
        model(**batch).loss.backward()
    else:
        tiny.schedule_step(schedule, batch)
        for p in params:
            p.grad /= 4   # the micro-batches again: the schedule divided already
    optimizer.step()
