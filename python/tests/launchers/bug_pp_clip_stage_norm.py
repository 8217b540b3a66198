"""torchtitan #596 (https://github.com/pytorch/torchtitan/issues/596, fixed by PR #649;
also Modalities #313): under pipeline parallelism clip_grad_norm_ on a rank computes the
norm of its own stage's gradients only, never combined over the pipeline group. Each
stage scales its gradients by its own clip coefficient where the step scales every
gradient by the one of the whole model's norm: wrong wherever the clipping bites (here
on both stages). pp_train_step_clip.py is the fixed step (torchtitan's
dist_utils.clip_grad_norm_ with pp_mesh)."""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import Schedule1F1B

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "missing_reduction"}

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
        clip_grad_norm_(params, MAX_NORM)   # the stage's own norm only
    optimizer.step()
