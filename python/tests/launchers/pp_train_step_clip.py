"""torchtitan's training step under pipeline parallelism, as its trainer writes it: the
schedule's step on the batch (the first stage given the inputs, the last the target),
then the gradients clipped by their global norm, each stage's norm raised to the
power 2 and summed over the pipeline group before the root is taken (torchtitan's
dist_utils.clip_grad_norm_ with pp_mesh), then the optimizer's step. The clipping bites
(max_norm far below the norm). Correct."""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "proved equivalent"}

MAX_NORM = 0.05
mesh = {"pp": 2}
model = tiny.builder()
inputs = tiny.batch(rows=8)
optimizer = tiny.sgd


def parallelize(module, device_mesh):
    return tiny.pipelined(module, device_mesh, Schedule1F1B)


def clip_grad_norm_(parameters, max_norm, pp_group=None):
    """torchtitan's dist_utils.clip_grad_norm_ for plain tensors, norm type 2."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, 2.0)
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
        stage = schedule._stage
        kwargs = {"input_ids": batch["input_ids"]} if stage.is_first else {}
        target = batch["labels"] if stage.is_last else None
        schedule.step(**kwargs, target=target, losses=[] if stage.is_last else None)
        clip_grad_norm_(params, MAX_NORM, pp_group=stage.group)
    optimizer.step()
