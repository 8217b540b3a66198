"""A train_step that drives a pipeline schedule over several steps (gradient
accumulation, as torchtitan's trainer runs it): how the rank's actions repeat, what
is refused, and the code between the steps in its place."""

import sys
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "launchers"))

import ground_truth  # noqa: E402
import tiny  # noqa: E402
from loom.torch.errors import CaptureError  # noqa: E402
from loom.torch.pipeline import Pipeline  # noqa: E402

ACCUMULATION = os.path.join(HERE, "launchers", "pp_grad_accum.py")


def test_each_step_runs_the_actions_on_the_micro_batches_after_the_step_before():
    actions = [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)]
    program = [("F", 0, 0), ("SEND_F", 0, 0), ("F", 0, 1), ("SEND_F", 0, 1)]
    pipe = Pipeline(schedule=None, stages=[], num_stages=2, microbatches=2, loss_fn=None,
                    scale_grads=True, actions=list(actions), pp_ranks=[0, 1],
                    stage_rank={0: 0, 1: 1}, program=list(program))
    pipe.repeat(3)
    assert pipe.total_microbatches == 6
    assert pipe.step_actions(0) == actions
    assert pipe.step_actions(2) == [("F", 0, 4), ("F", 0, 5), ("B", 0, 4), ("B", 0, 5)]
    assert pipe.step_program(1) == [("F", 0, 2), ("SEND_F", 0, 2), ("F", 0, 3),
                                    ("SEND_F", 0, 3)]
    assert len(pipe.actions) == 12


def _with_train_step(train_step):
    names = ground_truth.load(ACCUMULATION)
    names["train_step"] = train_step
    return names


def _pieces(batch, parts):
    return [dict(zip(batch, rows)) for rows in zip(*(t.chunk(parts) for t in batch.values()))]


def test_a_schedule_step_run_twice_on_the_whole_batch_is_refused():
    def twice(model, optimizer, batch):
        schedule = getattr(model, "schedule", None)
        if schedule is None:
            model(**batch).loss.backward()
        else:
            tiny.schedule_step(schedule, batch)
            tiny.schedule_step(schedule, batch)
        optimizer.step()
    with pytest.raises(CaptureError, match="gives the schedule's step the whole batch at its "
                                           "call 2"):
        ground_truth.verify(_with_train_step(twice))


def test_pieces_of_the_batch_out_of_order_are_refused():
    def reversed_pieces(model, optimizer, batch):
        schedule = getattr(model, "schedule", None)
        if schedule is None:
            model(**batch).loss.backward()
        else:
            for piece in reversed(_pieces(batch, 2)):
                tiny.schedule_step(schedule, piece)
        optimizer.step()
    with pytest.raises(CaptureError, match="gives the schedule's step piece 2 of 2 of the "
                                           "batch's rows at its call 1"):
        ground_truth.verify(_with_train_step(reversed_pieces))


def test_what_the_step_does_between_the_schedule_steps_runs_between_them():
    # The schedule divides .grad by its 4 micro-batches at the end of each step, what
    # .grad held before included; multiplying it back after every step but the last
    # leaves each micro-batch's gradient divided once: with the loss divided by the 2
    # accumulation steps, the mean over all 8 micro-batches, as on one device.
    def undo_the_scaling(model, optimizer, batch):
        schedule = getattr(model, "schedule", None)
        pieces = _pieces(batch, 2)
        for k, piece in enumerate(pieces):
            if schedule is None:
                for mb in _pieces(piece, 4):
                    tiny.forward_backward(model, mb, scale=1.0 / 8)
                continue
            tiny.schedule_step(schedule, piece)
            if k + 1 < len(pieces):
                for p in model.parameters():
                    p.grad.mul_(4)
        optimizer.step()
    names = _with_train_step(undo_the_scaling)
    from torch.distributed.pipelining import ScheduleGPipe
    from loom.torch import hf

    def parallelize(module, device_mesh):
        base = hf.causal_lm_loss(module)
        return tiny.pipelined(module, device_mesh, ScheduleGPipe, microbatches=4,
                              loss_fn=lambda logits, labels: base(logits, labels) / 2,
                              scale_grads=True)
    names["parallelize"] = parallelize
    report = ground_truth.verify(names)
    assert report.verdict == "proved equivalent", report.summary()
