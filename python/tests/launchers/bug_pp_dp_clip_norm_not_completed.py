"""pp2 x dp2 with torchtitan's clipping, except that the stage's norm is taken of the
gradients' local tensors (each rank's own shards) and never completed over the
data-parallel ranks before it is summed over the pipeline group: every rank clips by
another, too small norm. (Reading the DTensor norm with `to_local()` would be no bug:
DTensor completes the stack of shard norms before its norm.)"""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import Schedule1F1B
from torch.distributed.tensor import DTensor

import tiny

EXPECT = {"verdict": "not equivalent"}

MAX_NORM = 0.05
mesh = {"pp": 2, "dp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B, data_parallel=True)


def clip_grad_norm_(parameters, max_norm, pp_group=None):
    grads = [p.grad for p in parameters if p.grad is not None]
    # The bug: the norms of the local shards, where torchtitan takes the DTensors'.
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    total_norm = torch.nn.utils.get_total_norm(local, 2.0)
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
