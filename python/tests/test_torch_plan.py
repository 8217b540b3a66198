"""loom.torch's plan: the per-rank programs torch.distributed runs, proved
equivalent to the model's step, and run by Loom's CPU executor."""

import numpy as np
import pytest
import torch
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import loom
import loom.torch
from loom.torch import KeepFloat64

import torch_models


def tp_plan(model, **overrides):
    """Megatron-style tensor parallelism of a Hugging Face decoder's blocks."""
    plan = {}
    for i, _ in enumerate(model.model.layers):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        plan[p + "mlp.down_proj"] = RowwiseParallel()
    plan.update(overrides)
    return plan


def tensor_parallel(model, mesh):
    parallelize_module(model, mesh["tp"], tp_plan(model))


def executor_difference(report):
    """Largest relative difference of Loom's CPU executor running the captured plan
    from torch's own single-device step (float64, casts to float32 kept in float64)."""
    spec = report.spec
    values = loom.run_plan(spec.step, report.plan, spec.feeds())
    with KeepFloat64():
        inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in spec.trace.inputs]
        reference = [t.detach().numpy() for t in spec.trace.fn(*inputs)]
    worst = 0.0
    for name, r in zip(spec.outputs, reference):
        scale = max(float(np.max(np.abs(r))), 1e-30)
        worst = max(worst, float(np.max(np.abs(values[name] - r))) / scale)
    return worst


def test_llama_tensor_parallel_is_proved_and_runs_like_torch():
    # Colwise q/k/v/gate/up and Rowwise o/down on 2 ranks: proved equivalent, and the
    # executor running the plan gives torch's loss, parameters and AdamW states.
    report = loom.torch.verify(model=torch_models.builder("llama"), parallelize=tensor_parallel,
                               mesh={"tp": 2}, inputs=torch_models.batch(),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert report.exit_code == 0
    assert executor_difference(report) < 1e-10


def test_a_program_torch_cannot_run_is_a_capture_error():
    # Rowwise where the input is whole: torch's own sharding check stops the trace.
    def swapped(model, mesh):
        plan = tp_plan(model, **{"model.layers.1.mlp.up_proj": RowwiseParallel()})
        parallelize_module(model, mesh["tp"], plan)

    with pytest.raises(loom.torch.CaptureError) as e:
        loom.torch.verify(model=torch_models.builder("llama"), parallelize=swapped,
                          mesh={"tp": 2}, inputs=torch_models.batch(),
                          loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert "tracing the training step failed" in str(e.value)
