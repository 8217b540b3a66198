"""torchtitan's training step under pipeline parallelism with FSDP2 inside each stage
(pp2 x dp2), as its trainer writes it: the schedule's step on the batch, then the
gradients clipped by their global norm as torchtitan's dist_utils.clip_grad_norm_ does
(tiny.clip_grad_norm_): the norm of the stage's sharded gradients (DTensors: each rank's
norm of its shards, completed over the data-parallel ranks by `full_tensor`), squared
and summed over the pipeline group before the root is taken, then the optimizer's step.
The clipping bites (max_norm far below the norm). Correct."""

from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "proved equivalent"}

MAX_NORM = 0.05
mesh = {"pp": 2, "dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B, data_parallel=True)


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    params = list(model.parameters())
    if schedule is None:  # one device
        model(**batch).loss.backward()
        tiny.clip_grad_norm_(params, MAX_NORM)
    else:
        tiny.schedule_step(schedule, batch)
        tiny.clip_grad_norm_(params, MAX_NORM, pp_group=schedule._stage.group)
    optimizer.step()
