"""torchtitan 0.2.2's own jobs (the pinned package: its Llama 3 debug model, its
parallelize_llama, its trainer's step), built from torchtitan's command line, proved
by loom.torch and checked against a real run of the same job: every rank under gloo
against the same job on one device. Bugs are planted in torchtitan's own functions
the way they happened, and must be refuted at torchtitan's line."""

import json
import os
import subprocess
import sys

import pytest

import loom.torch
import real_run
from loom.torch.titan import titan_job

# The debug model (6 layers, width 256, vocabulary 2048) on a short batch.
SMALL = ["--model.name", "llama3", "--model.flavor", "debugmodel", "--training.seq_len", "16",
         "--training.local_batch_size", "2"]
# float32 parameters under FSDP too (its default mixed precision is bfloat16), so the
# real runs agree to float32's rounding.
EXACT = ["--training.mixed_precision_param", "float32"]
DEGREES = {
    "tp2": ["--parallelism.tensor_parallel_degree", "2"],
    "dp_shard2": ["--parallelism.data_parallel_shard_degree", "2"],
    "dp_shard2_tp2": ["--parallelism.data_parallel_shard_degree", "2",
                      "--parallelism.tensor_parallel_degree", "2"],
    # HSDP: the gradients reduced over dp_shard and over dp_replicate in turn.
    "dp_replicate2_dp_shard2": ["--parallelism.data_parallel_replicate_degree", "2",
                                "--parallelism.data_parallel_shard_degree", "2"],
}
TOLERANCE = 2e-4  # float32 gradients of a 6-layer model, summed in another order
# Clipping at torchtitan's max_norm (1.0) rescales these small models' gradients to
# the same norm whatever their scale, so a real run shows a scaled gradient only
# unclipped (Loom refutes it either way: below the norm it is not clipped away).
UNCLIPPED = ["--training.max_norm", "1e6"]


@pytest.fixture
def gloo_fsdp(monkeypatch):
    """FSDP2 reduces float32 gradients with NCCL's PREMUL_SUM, which gloo lacks; the
    real runs reduce with SUM and divide after, as FSDP does where PREMUL_SUM is
    missing (the same gradients)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives
    original = collectives._get_gradient_divide_factors

    def sum_then_divide(rs_group, ar_group, dtype, device_type="", factor=None,
                        force_sum_reduction_for_comms=False):
        return original(rs_group, ar_group, dtype, device_type, factor, True)
    monkeypatch.setattr(collectives, "_get_gradient_divide_factors", sum_then_divide)


def _verify(job):
    names = job.launcher()
    return loom.torch.verify(model=names["model"], parallelize=names["parallelize"],
                             mesh=names["mesh"], inputs=names["inputs"],
                             optimizer=names["optimizer"], train_step=names["train_step"])


def _real(job):
    names = job.launcher()
    return real_run.run_parallel(names), real_run.run_single(names)


@pytest.mark.parametrize("degrees", sorted(DEGREES))
def test_titan_llama3_proved_and_run(degrees, gloo_fsdp):
    job = titan_job(SMALL + EXACT + DEGREES[degrees])
    report = _verify(job)
    assert report.verdict == "proved equivalent", report.summary()
    parallel, single = _real(job)
    comparison = real_run.compare(parallel, single)
    assert not comparison.missing and not comparison.disagreements, comparison
    assert comparison.grads < TOLERANCE and comparison.params < TOLERANCE, comparison


@pytest.mark.parametrize("degrees", [
    ["--parallelism.context_parallel_degree", "2"],
    ["--parallelism.context_parallel_degree", "2", "--parallelism.tensor_parallel_degree", "2"],
    ["--parallelism.context_parallel_degree", "2",
     "--parallelism.data_parallel_shard_degree", "2"],
], ids=["cp2", "cp2_tp2", "cp2_dp_shard2"])
def test_titan_context_parallel_runs_for_real(degrees, gloo_fsdp):
    """torchtitan's CP (torch's context_parallel: load-balanced chunks, keys and values
    all-gathered around its ring, partial outputs merged by their log-sum-exp) runs
    for real on CPU processes, the CPU's attention kernel in torch's ring, and gives
    the single device's gradients and update: the ground truth a captured CP job will
    be held to. Capturing it is refused by name (test below)."""
    job = titan_job(SMALL + EXACT + degrees, capture=False)
    assert job.degrees["cp"] == 2
    parallel, single = _real(job)
    comparison = real_run.compare(parallel, single)
    assert not comparison.missing and not comparison.disagreements, comparison
    assert comparison.grads < TOLERANCE and comparison.params < TOLERANCE, comparison
    assert abs(real_run.gradient_factor(parallel, single) - 1) < 1e-3


def test_titan_defaults_bfloat16_fsdp_proved():
    """torchtitan's default mixed precision under FSDP (bfloat16 parameters,
    float32 reductions) and its default selective activation checkpointing."""
    job = titan_job(SMALL + DEGREES["dp_shard2_tp2"])
    assert _verify(job).verdict == "proved equivalent"


def _scaled_failure(report):
    assert report.verdict == "not equivalent", report.summary()
    return [f for f in report.failures if f.cls == "scaled"]


def test_titan_fsdp_divides_the_global_token_mean_again(monkeypatch, gloo_fsdp):
    """torchtitan divides the summed loss by the tokens of the whole batch and so
    turns FSDP's own division off (disable_fsdp_gradient_division); without that,
    FSDP averages the already global mean again: gradients 1/2 of the model's."""
    import torchtitan.models.llama3.infra.parallelize as parallelize
    monkeypatch.setattr(parallelize, "disable_fsdp_gradient_division", lambda model: None)
    job = titan_job(SMALL + EXACT + UNCLIPPED + DEGREES["dp_shard2"])
    failures = _scaled_failure(_verify(job))
    assert failures and any("torchtitan/" in (f.source or "") for f in failures)
    parallel, single = _real(job)
    assert real_run.gradient_factor(parallel, single) == pytest.approx(0.5, rel=1e-3)


def _local_count(x, mesh=None, extra_pg=None):
    return x.float()  # the rank's own tokens, not summed over the batch mesh


def test_titan_token_count_not_reduced_over_the_batch(monkeypatch, gloo_fsdp):
    """Each rank dividing its summed loss by its own tokens (the count not summed
    over the batch mesh): with FSDP summing, the gradients are twice the model's."""
    from torchtitan.distributed import utils as dist_utils
    monkeypatch.setattr(dist_utils, "dist_sum", _local_count)
    job = titan_job(SMALL + EXACT + UNCLIPPED + DEGREES["dp_shard2"])
    failures = _scaled_failure(_verify(job))
    # Named at the planted line.
    line = f"test_torch_titan.py:{_local_count.__code__.co_firstlineno + 1}"
    assert any((f.source or "").endswith(line) for f in failures), [f.source for f in failures]
    parallel, single = _real(job)
    assert real_run.gradient_factor(parallel, single) == pytest.approx(2.0, rel=1e-3)


def _pp2(schedule):
    return ["--parallelism.pipeline_parallel_degree", "2",
            "--parallelism.pipeline_parallel_schedule", schedule]


# One stage per rank; two per rank (interleaved: stages 0 and 2 on rank 0; V-shaped:
# stages 0 and 3), whose clipping stacks the norms of parameters that are not
# consecutive in the model.
@pytest.mark.parametrize("schedule", ["1F1B", "Interleaved1F1B", "ZBVZeroBubble"])
def test_titan_pipeline_gradients_scaled_by_the_global_token_count(schedule):
    """torchtitan 0.2.2 as shipped: under pipeline parallelism the schedule runs the
    summed loss (scale_grads=False) and the trainer divides by the batch's tokens only
    the loss it logs, so the gradients are the token count (2 x 16) times the model's
    (the class of torchtitan #2972, fixed later by dividing in the loss stage).
    Refuted at the loss, and only there; the real run shows the factor."""
    job = titan_job(SMALL + UNCLIPPED + _pp2(schedule))
    report = _verify(job)
    assert len(report.failures) == 1, report.summary()
    assert report.verdict == "not equivalent", report.summary()
    assert any(f.module == "loss" for f in report.failures), report.summary()
    parallel, single = _real(job)
    assert real_run.gradient_factor(parallel, single) == pytest.approx(32.0, rel=1e-4)


# Pipelines beside FSDP and tensor parallelism: a stage's checkpointed blocks run
# their forward again in the backward on the parameters the capture gives them, and its
# clipping stacks the norms of shards (each completed over its data- and
# tensor-parallel ranks, then the stage's rows of the step's stack of norms).
@pytest.mark.parametrize("degrees, ranks, factor", [
    (["--parallelism.data_parallel_shard_degree", "2"], {2, 3}, 64.0),
    (["--parallelism.tensor_parallel_degree", "2"], {2, 3}, 32.0),
], ids=["pp2_dp_shard2", "pp2_tp2"])
def test_titan_pipeline_beside_fsdp_and_tp_refuted_at_the_loss(degrees, ranks, factor,
                                                                gloo_fsdp):
    """The same torchtitan 0.2.2 bug under pp2 x dp_shard2 and pp2 x tp2: refuted with
    one failure, at the loss on the last stage's ranks; the real run's gradients are the
    batch's token count times the model's (4 x 16 and 2 x 16)."""
    job = titan_job(SMALL + EXACT + UNCLIPPED + _pp2("1F1B") + degrees)
    report = _verify(job)
    assert report.verdict == "not equivalent", report.summary()
    assert len(report.failures) == 1, report.summary()
    failure = report.failures[0]
    assert failure.cls == "computation_differs", report.summary()
    assert set(failure.devices) == ranks, report.summary()
    parallel, single = _real(job)
    assert real_run.gradient_factor(parallel, single) == pytest.approx(factor, rel=1e-4)


def _command(*args, cwd):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "loom.torch", "titan", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def test_titan_command_proves_a_job_from_torchtitans_arguments(tmp_path):
    report = tmp_path / "report.json"
    run = _command(*SMALL, *DEGREES["tp2"], "--report", str(report), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "job:       torchtitan llama3 debugmodel, tp2 on 2 ranks, batch 2 x seq 16" in \
        run.stdout
    assert "verdict:   proved equivalent" in run.stdout
    doc = json.loads(report.read_text())
    assert doc["verdict"] == "equivalent" and doc["torch"]["mesh"] == {"tp": 2}


@pytest.mark.parametrize("args, words", [
    (["--model.flavor", "nosuch"], "--model.flavor nosuch: llama3 has"),
    (["--parallelism.data_parallel_replicate_degree", "2"],
     "torchtitan's DDP (torch.distributed._composable.replicate"),
    (["--parallelism.context_parallel_degree", "2"],
     "context parallelism (cp=2) in a torchtitan job is not captured yet"),
    (["--parallelism.tensor_parallel_degree", "2", "--nproc", "3"],
     "3 ranks do not split into the degrees given"),
])
def test_titan_command_refuses_with_the_reason(tmp_path, args, words):
    run = _command(*SMALL, *args, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert words in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
