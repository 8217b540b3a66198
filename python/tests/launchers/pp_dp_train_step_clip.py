"""torchtitan's training step under pipeline parallelism with FSDP2 inside each stage
(pp2 x dp2), as its trainer writes it: the schedule's step on the batch, then the
gradients clipped by their global norm as torchtitan's dist_utils.clip_grad_norm_
does: the norm of the stage's sharded gradients (DTensors: each rank's norm of its
shards, completed over the data-parallel ranks by `full_tensor`), squared and summed
over the pipeline group before the root is taken, then the optimizer's step. The
clipping bites (max_norm far below the norm). Correct."""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import Schedule1F1B
from torch.distributed.tensor import DTensor

import tiny

EXPECT = {"verdict": "proved equivalent"}

MAX_NORM = 0.05
mesh = {"pp": 2, "dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B, data_parallel=True)


def clip_grad_norm_(parameters, max_norm, pp_group=None):
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    if pp_group is not None:
        total_norm **= 2.0
        dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=pp_group)
        total_norm **= 1.0 / 2.0
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    params = list(model.parameters())
    if schedule is None:  # one device
        model(**batch).loss.backward()
        clip_grad_norm_(params, MAX_NORM)
    else:
        tiny.schedule_step(schedule, batch)
        clip_grad_norm_(params, MAX_NORM, pp_group=schedule._stage.group)
    optimizer.step()
