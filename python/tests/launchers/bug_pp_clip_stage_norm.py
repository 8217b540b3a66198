"""torchtitan #596 (https://github.com/pytorch/torchtitan/issues/596, fixed by PR #649;
also Modalities #313): under pipeline parallelism clip_grad_norm_ on a rank computes the
norm of its own stage's gradients only, never combined over the pipeline group. Each
stage scales its gradients by its own clip coefficient where the step scales every
gradient by the one of the whole model's norm: wrong wherever the clipping bites (here
on both stages). pp_train_step_clip.py is the fixed step (torchtitan's
dist_utils.clip_grad_norm_ with pp_mesh)."""

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


def train_step(model, optimizer, batch):
    schedule = getattr(model, "schedule", None)
    params = list(model.parameters())
    if schedule is None:  # one device
        model(**batch).loss.backward()
        tiny.clip_grad_norm_(params, MAX_NORM)
    else:
        tiny.schedule_step(schedule, batch)
        tiny.clip_grad_norm_(params, MAX_NORM)   # the stage's own norm only
    optimizer.step()
