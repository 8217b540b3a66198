"""Real bugs of parallel training, planted in torch-level code the way they happened
(../shared/reference/peers.md part B): each is refuted (exit 1) with its class, the
logical tensor, and the module path and source line of the user's code where the
ranks' values first part from the model's step."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.tensor.parallel.loss as loss_parallel_impl
import transformers
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               PrepareModuleInputOutput, RowwiseParallel,
                                               loss_parallel, parallelize_module)

import loom.torch
from loom.torch import hf
import torch_models
from test_torch_plan import fsdp, sequence_parallel, tp_plan


def verify(parallelize, mesh=None, batch_size=2, model=None, **kwargs):
    return loom.torch.verify(model=model or torch_models.builder("llama"),
                             parallelize=parallelize, mesh=mesh or {"tp": 2},
                             inputs=torch_models.batch(batch_size=batch_size),
                             loss=kwargs.pop("loss", torch_models.hf_loss),
                             optimizer=torch_models.adamw, **kwargs)


def expect(report, cls, module, code):
    """Refuted, the first failure of class `cls` at `module` (a prefix), on the user's
    line holding `code`."""
    assert report.exit_code == 1, report.summary()
    first = report.failures[0]
    assert first.cls == cls, report.summary()
    assert first.module.startswith(module), report.summary()
    assert code in first.code, report.summary()
    assert first.tensor and first.source.split(":")[-1].isdigit(), report.summary()
    return first


def test_sequence_parallel_norm_weight_gradient_not_all_reduced():
    # Megatron-LM #1446: under sequence parallelism a norm computes on the rank's
    # chunk of the sequence; its replicated weight's gradient is each rank's partial
    # sum. Here the first block's norm runs on local tensors with a plain weight
    # (PrepareModuleInputOutput instead of SequenceParallel): nothing sums it.
    local_norm = PrepareModuleInputOutput(
        input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_input=True,
        output_layouts=(Shard(1),), desired_output_layouts=(Shard(1),),
        use_local_output=False)
    report = verify(lambda m, mesh: sequence_parallel(
        m, mesh, block_overrides={0: {"input_layernorm": local_norm}}))
    expect(report, "missing_reduction", "model.layers.0.input_layernorm",
           "self.weight * hidden_states")


def _log_softmax_without(collective):
    """loss parallel's log-softmax over a vocabulary piece, missing one all-reduce."""
    def log_softmax(x, dim, half_to_float, mesh, mesh_dim):
        x_max = torch.amax(x, dim, keepdim=True)
        if collective != "max":
            x_max = funcol.all_reduce(x_max, reduceOp="max", group=(mesh, mesh_dim))
        shifted = x - x_max
        sumexp = torch.sum(torch.exp(shifted), dim, keepdim=True)
        if collective != "sum":
            sumexp = funcol.all_reduce(sumexp, reduceOp="sum", group=(mesh, mesh_dim))
        return shifted - torch.log(sumexp)
    return log_softmax


def test_loss_parallel_missing_its_max_or_its_sum(monkeypatch):
    # A vocabulary-parallel cross-entropy whose row maximum, or whose sum of
    # exponentials, is never all-reduced over the vocabulary pieces.
    for missing, made, needs in (("max", "torch.amax(x, dim", "exp"),
                                 ("sum", "torch.sum(torch.exp(shifted)", "log")):
        monkeypatch.setattr(loss_parallel_impl, "_log_softmax", _log_softmax_without(missing))
        report = verify(lambda m, mesh: sequence_parallel(m, mesh, loss_parallel=True),
                        train_context=loss_parallel)
        first = expect(report, "missing_reduction", "", made)
        assert "test_torch_bugs.py:" in first.source
        assert f"'{needs}' needs it complete" in first.message


def test_rowwise_output_left_partial_where_it_meets_the_residual():
    # RowwiseParallel(output_layouts=Partial()): each rank adds its partial sum of
    # the down projection to the residual stream and nothing sums them.
    report = verify(lambda m, mesh: parallelize_module(m, mesh["tp"], tp_plan(m, **{
        "model.layers.1.mlp.down_proj": RowwiseParallel(output_layouts=Partial())})))
    first = expect(report, "missing_reduction", "model.layers.1.mlp.down_proj",
                   "self.down_proj(")
    assert first.found_in.startswith("model.norm")


def test_prepare_module_input_declares_an_already_reduced_input_partial():
    # The MLP's input is declared Partial (as if the attention's output projection
    # left it unreduced), but RowwiseParallel already all-reduced it: the redistribution
    # to Replicate sums two whole copies.
    report = verify(lambda m, mesh: parallelize_module(m, mesh["tp"], tp_plan(m, **{
        "model.layers.1.mlp": PrepareModuleInput(input_layouts=(Partial(),),
                                                 desired_input_layouts=(Replicate(),))})))
    first = expect(report, "scaled", "model.layers.1.post_attention_layernorm",
                   "self.weight * hidden_states")
    assert "2 times the complete value" in first.message


def test_tied_embedding_gradient_not_synchronised():
    # piper #13, Cornstarch PR #16: tied input and output embeddings, parallelized
    # apart (the embedding row-wise, the head column-wise) and never tied again: each
    # copy is updated with its own gradient only.
    config = torch_models.configs()["llama"]
    config.tie_word_embeddings = True

    def build():
        torch.manual_seed(0)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float64)

    def parallelize(model, mesh, tie_again):
        plan = tp_plan(model)
        plan["model.embed_tokens"] = RowwiseParallel(input_layouts=Replicate())
        plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
        parallelize_module(model, mesh["tp"], plan)
        if tie_again:
            model.lm_head.weight = model.model.embed_tokens.weight

    report = verify(lambda m, mesh: parallelize(m, mesh, True), model=build)
    assert report.verdict == "proved equivalent", report.summary()
    report = verify(lambda m, mesh: parallelize(m, mesh, False), model=build)
    first = expect(report, "computation_differs", "", "torch.optim.AdamW")
    assert "where the spec reads" in first.message
    # Each copy's update reads its own gradient, not the sum of both.
    assert {f.module for f in report.failures} == {"lm_head.weight",
                                                   "model.embed_tokens.weight"}


def test_loss_divided_by_the_data_parallel_degree_twice():
    # The loss divided by the world size, as for a summing all-reduce, while FSDP
    # averages the gradients: every update is scaled by 1/2.
    def loss(output):
        n = dist.get_world_size() if dist.is_initialized() else 1
        return output.loss / n

    report = verify(fsdp, mesh={"dp": 2}, batch_size=4, loss=loss)
    first = expect(report, "scaled", "loss", "return output.loss / n")
    assert "scaled by 1/2" in first.message


def test_fsdp_gradients_reduced_over_the_wrong_mesh_dim():
    # fully_shard over the "tp" dim of a dp x tp mesh: the ranks that hold the same
    # batch rows average their (equal) gradients, the data-parallel ranks never do.
    from torch.distributed.fsdp import fully_shard

    def wrong_dim(model, mesh):
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["tp"])
        fully_shard(model, mesh=mesh["tp"])

    report = verify(wrong_dim, mesh={"dp": 2, "tp": 2}, batch_size=4)
    first = expect(report, "doubled_piece", "", "")
    assert "twice" in first.message


def test_rope_positions_not_offset_under_sequence_sharding():
    # Each rank runs the model on its chunk of the sequence (context-parallel style)
    # and the model numbers the chunk's positions from 0: rank 1's queries and keys
    # are rotated by the first chunk's positions.
    def sequence_sharded(model, mesh):
        parallelize_module(model, mesh["cp"], PrepareModuleInput(
            input_kwarg_layouts={"input_ids": Replicate(), "labels": Replicate()},
            desired_input_kwarg_layouts={"input_ids": Shard(1), "labels": Shard(1)},
            use_local_output=True))

    report = verify(sequence_sharded, mesh={"cp": 2}, batch_size=1)
    first = expect(report, "wrong_shard", "model.layers.0.self_attn", "q_embed = (q * cos)")
    assert first.devices == [1]


def test_pipeline_stage_sending_the_wrong_tensor():
    # The first stage sends its embeddings instead of its layers' output: the second
    # stage's first layer computes on what the model's first layer reads.
    class EmbeddingsOnly(hf.DecoderStage):
        def forward(self, x=None, input_ids=None):
            if self.first:
                return self.hf.model.embed_tokens(input_ids)
            return super().forward(x, input_ids)

    def parallelize(model, mesh):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        pp = mesh["pp"]
        s, n = pp.get_local_rank(), pp.size()
        stage = PipelineStage(EmbeddingsOnly(model, s, n), s, n, torch.device("cpu"),
                              group=pp.get_group())
        return Schedule1F1B(stage, 4, loss_fn=hf.causal_lm_loss(model))

    report = verify(parallelize, mesh={"pp": 2}, batch_size=4)
    first = expect(report, "computation_differs", "model.layers.1", "")
    assert "where the spec reads" in first.message


def test_gradient_accumulation_dividing_by_the_wrong_count():
    # DeepSpeed #7773, torchtitan #1733: micro-batch gradients summed, not averaged
    # (scale_grads=False with a mean loss); AReaL PR #1273: divided twice (a loss
    # already divided by the number of micro-batches, then scaled by the schedule).
    from test_torch_plan import pipelined
    report = verify(lambda m, mesh: pipelined(m, mesh, scale_grads=False), mesh={"pp": 2},
                    batch_size=4)
    first = expect(report, "scaled", "", "")
    assert "scaled by 4" in first.message or "factor" in first.message

    def divided(model, mesh):
        schedule = pipelined(model, mesh)
        loss_fn = schedule._loss_fn
        schedule._loss_fn = lambda logits, labels: loss_fn(logits, labels) / 4
        return schedule

    report = verify(divided, mesh={"pp": 2}, batch_size=4)
    first = expect(report, "scaled", "", "")


def test_moe_router_gradient_dropped():
    # transformers PR #48205, NeMo Automodel PR #1412: the router's gradient never
    # flows back (here a forward hook on the router, logging its scores, returns them
    # detached): the block's input gradient lacks the router's share and the router
    # is never updated.
    from test_torch_plan import moe_tensor_parallel

    def parallelize(model, mesh):
        moe_tensor_parallel(model, mesh)
        for layer in model.model.layers:
            layer.block_sparse_moe.gate.register_forward_hook(lambda m, i, out: out.detach())

    report = verify(parallelize, model=torch_models.builder("mixtral"))
    first = expect(report, "computation_differs", "model.layers.1.block_sparse_moe", "")
    assert "where the spec reads" in first.message
    missing = {f.module for f in report.failures if f.cls == "missing_piece"}
    assert "model.layers.0.block_sparse_moe.gate.weight" in missing


def test_colwise_output_reduced_as_if_rowwise():
    # Colwise and Rowwise swapped on one projection, Megatron style: the up
    # projection is column-parallel (each rank holds half of its output features), but
    # the code treats it as row-parallel and all-reduces its output as partial sums.
    def parallelize(model, mesh):
        parallelize_module(model, mesh["tp"], tp_plan(model))
        up = model.model.layers[1].mlp.up_proj
        up.register_forward_hook(
            lambda m, i, out: funcol.all_reduce(out, "sum", (mesh["tp"], 0)))

    report = verify(parallelize)
    first = expect(report, "wrong_group", "model.layers.1.mlp.up_proj", "self.up_proj(x)")
    assert "combines region" in first.message
