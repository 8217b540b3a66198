"""pp2 x dp2 with torchtitan's clipping, except that the stage's norm is taken of the
gradients' local tensors (each rank's own shards) and never completed over the
data-parallel ranks before it is summed over the pipeline group: every rank clips by
another, too small norm. (Reading the DTensor norm with `to_local()` would be no bug:
DTensor completes the stack of shard norms before its norm.)"""

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


def local(g):
    """The bug: the norm of the rank's own shards, where torchtitan takes the DTensor's."""
    return g.to_local() if isinstance(g, DTensor) else g


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    params = list(model.parameters())
    if schedule is None:  # one device
        model(**batch).loss.backward()
        tiny.clip_grad_norm_(params, MAX_NORM)
    else:
        tiny.schedule_step(schedule, batch)
        tiny.clip_grad_norm_(params, MAX_NORM, pp_group=schedule._stage.group, norm_of=local)
    optimizer.step()
