"""loom.torch's plan: the per-rank programs torch.distributed runs, proved
equivalent to the model's step, and run by Loom's CPU executor."""

import os

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

import loom
import loom.torch
from loom.torch import KeepFloat64, hf

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


def sequence_parallel(model, mesh, loss_parallel=False, block_overrides=None):
    """torchtitan's tensor and sequence parallelism, on Hugging Face module names: a
    vocabulary-split embedding whose output is split along the sequence, sequence-
    parallel norms, attention and MLP inputs gathered, outputs reduce-scattered.
    With `loss_parallel` the logits stay split along the vocabulary (the loss is
    computed under torch's loss_parallel). `block_overrides` {block index: {module:
    style}} replaces styles of single blocks."""
    tp = mesh["tp"]
    lm_head = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                              use_local_output=False) if loss_parallel else \
        ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    parallelize_module(model, tp, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": lm_head,
    })
    for i, layer in enumerate(model.model.layers):
        parallelize_module(layer, tp, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={"hidden_states":
                                                                         Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            **(block_overrides or {}).get(i, {}),
        })


def executor_difference(report):
    """Largest relative difference of Loom's CPU executor running the captured plan
    from torch's own single-device step (float64, casts to float32 kept in float64)."""
    spec = report.spec
    values = loom.run_plan(report.step, report.plan, spec.feeds())
    with KeepFloat64():
        inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in spec.trace.inputs]
        reference = [t.detach().numpy() for t in spec.trace.fn(*inputs)]
    worst = 0.0
    for name, r in zip(spec.outputs, reference):
        if name not in values:
            continue  # the loss, where the ranks hold shares of it
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


@pytest.mark.parametrize("model", ["qwen2", "mistral"])
def test_decoders_under_tensor_parallelism_are_proved(model):
    # Qwen2 (biased q/k/v, split with their weights) and Mistral, as Llama.
    report = loom.torch.verify(model=torch_models.builder(model), parallelize=tensor_parallel,
                               mesh={"tp": 2}, inputs=torch_models.batch(),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert executor_difference(report) < 1e-10


def gpt2_tensor_parallel(model, mesh):
    """GPT-2's Conv1D projections split with Conv1D styles (hf.conv1d_styles):
    the MLP column- then row-wise; the fused q/k/v projection column-wise and gathered
    (its heads interleave q, k and v, so the attention runs whole), the output
    projection row-wise."""
    col, row = hf.conv1d_styles()
    for block in model.transformer.h:
        parallelize_module(block, mesh["tp"], {
            "attn.c_attn": col(output_layouts=Replicate()),
            "attn.c_proj": row(input_layouts=Replicate()),
            "mlp.c_fc": col(), "mlp.c_proj": row()})


def test_gpt2_under_tensor_parallelism_is_proved_and_runs_like_torch():
    report = loom.torch.verify(model=torch_models.builder("gpt2"),
                               parallelize=gpt2_tensor_parallel, mesh={"tp": 2},
                               inputs=torch_models.batch(), loss=torch_models.hf_loss,
                               optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert executor_difference(report) < 1e-10


def moe_tensor_parallel(model, mesh):
    """Attention as for Llama; every expert's MLP split (w1, w3 column-wise, w2 row-wise);
    the router replicated."""
    for layer in model.model.layers:
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel()}
        for e in range(len(layer.block_sparse_moe.experts)):
            p = f"block_sparse_moe.experts.{e}."
            plan.update({p + "w1": ColwiseParallel(), p + "w3": ColwiseParallel(),
                         p + "w2": RowwiseParallel()})
        parallelize_module(layer, mesh["tp"], plan)


def test_mixtral_under_tensor_parallelism_is_proved_and_runs_like_torch():
    # Mixtral (4 experts, top 2): the sparse block runs as Loom's routing ops while
    # traced; the executor matches torch running Hugging Face's own sparse block.
    report = loom.torch.verify(model=torch_models.builder("mixtral"),
                               parallelize=moe_tensor_parallel, mesh={"tp": 2},
                               inputs=torch_models.batch(), loss=torch_models.hf_loss,
                               optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert executor_difference(report) < 1e-10


def test_sequence_parallelism_is_proved_and_runs_like_torch():
    # Sequence-split activations between the blocks, all-gathers before attention and
    # the MLP, reduce-scatters after them, a vocabulary-split embedding.
    report = loom.torch.verify(model=torch_models.builder("llama"),
                               parallelize=sequence_parallel, mesh={"tp": 2},
                               inputs=torch_models.batch(), loss=torch_models.hf_loss,
                               optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    kinds = {c["kind"] for c in __import__("json").loads(report.plan_json)["collectives"]}
    assert {"all_gather", "reduce_scatter"} <= kinds
    assert executor_difference(report) < 1e-10


def test_loss_parallel_is_proved_and_runs_like_torch():
    # The logits stay split along the vocabulary and torch's loss_parallel computes
    # the cross-entropy over the pieces: a max and a sum of exponentials all-reduced,
    # the picked log-probabilities masked to each piece and summed.
    from torch.distributed.tensor.parallel import loss_parallel
    report = loom.torch.verify(model=torch_models.builder("llama"),
                               parallelize=lambda m, mesh: sequence_parallel(
                                   m, mesh, loss_parallel=True),
                               mesh={"tp": 2}, inputs=torch_models.batch(),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw,
                               train_context=loss_parallel)
    assert report.verdict == "proved equivalent", report.summary()
    reduces = [c["reduce"] for c in __import__("json").loads(report.plan_json)["collectives"]
               if c["kind"] == "all_reduce"]
    assert "max" in reduces
    assert executor_difference(report) < 1e-10


def fsdp(model, mesh):
    """FSDP2 as torchtitan applies it: every block, then the root."""
    from torch.distributed.fsdp import fully_shard
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])


def replicate(model, mesh):
    from torch.distributed._composable.replicate_with_fsdp import replicate
    replicate(model, mesh=mesh["dp"])


@pytest.mark.parametrize("parallelize", [fsdp, replicate], ids=["fsdp", "replicate"])
def test_data_parallelism_is_proved_and_runs_like_torch(parallelize):
    # Each rank trains on half the batch; FSDP reduce-scatters (replicate all-reduces)
    # the averaged gradients: the same update as one device on the whole batch.
    report = loom.torch.verify(model=torch_models.builder("llama"), parallelize=parallelize,
                               mesh={"dp": 2}, inputs=torch_models.batch(batch_size=4),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    kinds = {c["kind"] for c in __import__("json").loads(report.plan_json)["collectives"]}
    assert kinds >= ({"all_gather", "reduce_scatter"} if parallelize is fsdp else {"all_reduce"})
    assert executor_difference(report) < 1e-10


def test_tensor_and_data_parallelism_together_are_proved():
    # tp2 x dp2: TP first, then FSDP2 over the dp mesh dim (torchtitan's order); FSDP
    # shards what TP already split (_StridedShard), gradients reduce over dp only.
    def tp_fsdp(model, mesh):
        tensor_parallel(model, mesh)
        fsdp(model, mesh)

    report = loom.torch.verify(model=torch_models.builder("llama"), parallelize=tp_fsdp,
                               mesh={"dp": 2, "tp": 2}, inputs=torch_models.batch(batch_size=4),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert executor_difference(report) < 1e-10


def _checkpointed(builder, **options):
    """The model of `builder` with every block wrapped by torch's checkpoint_wrapper
    (torchtitan's full activation checkpointing)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    def build():
        model = builder()
        for i, layer in enumerate(model.model.layers):
            model.model.layers[i] = checkpoint_wrapper(layer, preserve_rng_state=False,
                                                       **options)
        return model
    return build


def _block_tasks(report, kind, phase=None, device=0):
    import json
    return sum(1 for t in json.loads(report.plan_json)["tasks"]
               if t["device"] == device and t["kind"] == kind and t["layer"] >= 0 and
               phase in (None, t["phase"]))


def test_activation_checkpointing_recomputes_each_block_in_the_plan():
    # Each checkpointed block's forward runs again in the backward: the plan has each
    # block's forward matmuls twice (all but its last, the MLP's down projection, whose
    # output the backward does not read), and still computes the step's values
    # (proved; the executor gives torch's parameters and states).
    def run(builder):
        return loom.torch.verify(model=builder, parallelize=fsdp, mesh={"dp": 2},
                                 inputs=torch_models.batch(), loss=torch_models.hf_loss,
                                 optimizer=torch_models.adamw)
    plain = run(torch_models.builder("llama"))
    checkpointed = run(_checkpointed(torch_models.builder("llama")))
    assert checkpointed.verdict == "proved equivalent", checkpointed.summary()
    recomputed = _block_tasks(checkpointed, "matmul") - _block_tasks(plain, "matmul")
    layers = 2
    assert recomputed == _block_tasks(plain, "matmul", "forward") - layers > 0
    assert executor_difference(checkpointed) < 1e-10


def test_complex_rotary_embeddings_under_local_output_tensor_parallelism_run_like_torch():
    # torchtitan's Llama form (a complex64 rotary table, view_as_complex and
    # view_as_real) under its TP + SP plan with local tensors between blocks: proved,
    # and the executor, holding each complex tensor as its real view, gives torch's
    # parameters and states (the rotary products computed in float32, as torch does).
    import ground_truth
    names = ground_truth.load(f"{ground_truth.LAUNCHER_DIR}/titan_llama_tp_sp.py")
    report = ground_truth.verify(names)
    assert report.verdict == "proved equivalent", report.summary()
    assert executor_difference(report) < 1e-5


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


def pipelined(model, mesh, microbatches=4, schedule=None, tensor_parallel=False,
              data_parallel=False, **schedule_options):
    """torch.distributed.pipelining as torchtitan applies it to a decoder: the model
    split into one stage per rank of "pp" (hf.DecoderStage), optionally
    tensor parallel over "tp" and FSDP2 over "dp" inside each stage, run by a
    1F1B schedule over `microbatches` micro-batches."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    from torch.distributed.fsdp import fully_shard
    pp = mesh["pp"]
    s, n = pp.get_local_rank(), pp.size()
    stage_module = hf.DecoderStage(model, s, n)
    layers = [layer for layer in stage_module.hf.model.layers
              if not isinstance(layer, hf.Skip)]
    if tensor_parallel:
        for layer in layers:
            parallelize_module(layer, mesh["tp"], {
                "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()})
    if data_parallel:
        for layer in layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(stage_module, mesh=mesh["dp"])
    stage = PipelineStage(stage_module, s, n, torch.device("cpu"), group=pp.get_group())
    return (schedule or Schedule1F1B)(stage, microbatches,
                                      loss_fn=hf.causal_lm_loss(model),
                                      **schedule_options)


def test_pipeline_1f1b_with_four_microbatches_is_proved_and_runs_like_torch():
    # Two stages, Schedule1F1B over 4 micro-batches: activations and gradients sent
    # between the stages, the plan ordered as the schedule runs (its safety checked).
    report = loom.torch.verify(model=torch_models.builder("llama"), parallelize=pipelined,
                               mesh={"pp": 2}, inputs=torch_models.batch(batch_size=4),
                               loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    assert report.verdict == "proved equivalent", report.summary()
    assert report.loom_report.schedule_checked
    plan = __import__("json").loads(report.plan_json)
    assert sum(c["kind"] == "send_recv" for c in plan["collectives"]) == 8  # 4 each way
    assert executor_difference(report) < 1e-10


def test_tensor_data_and_pipeline_parallelism_together_are_proved():
    # pp2 x dp2 x tp2 (8 ranks): each stage tensor parallel, then FSDP2, under 1F1B.
    report = loom.torch.verify(
        model=torch_models.builder("llama"),
        parallelize=lambda m, mesh: pipelined(m, mesh, tensor_parallel=True, data_parallel=True),
        mesh={"pp": 2, "dp": 2, "tp": 2}, inputs=torch_models.batch(batch_size=16),
        loss=torch_models.hf_loss, optimizer=torch_models.adamw)
    # The launcher picks its stage by its pipeline rank: the same on every rank of a
    # stage, so one trace per stage stands for its four ranks.
    assert report.capture == "one rank traced per pipeline rank (2 of 8)", report.capture
    assert report.verdict == "proved equivalent", report.summary()
    assert report.loom_report.schedule_checked
    assert executor_difference(report) < 1e-10


def test_at_real_size_the_fake_model_proves_and_refutes_what_the_real_one_does():
    # fake=True: the model and everything it computes are fake, the batch real (what
    # the loss reads off it, a token count, is a constant on one device and on the
    # ranks alike). A Hugging Face model under tp2 with its own loss is proved; a
    # SUM all-reduce never divided is refuted, as with real tensors.
    import ground_truth
    for launcher, verdict in (("hf_llama_tp.py", "proved equivalent"),
                              ("ddp_step_sum_no_divide.py", "not equivalent")):
        names = ground_truth.load(os.path.join(ground_truth.LAUNCHER_DIR, launcher))
        report = loom.torch.verify(fake=True, **{k: names[k] for k in ground_truth.VERIFY_NAMES
                                                 if k in names})
        assert report.verdict == verdict, report.summary()
