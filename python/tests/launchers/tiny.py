"""What the launchers of this folder share: a tiny Hugging Face Llama at its default
settings (2 layers, width 32, float64, seeded), a batch, an optimizer, and the
parallelisms they build on. Each launcher file is a program as a user writes it;
`EXPECT` in it says what its real run shows (the test suite checks Loom's verdict
against that run, and that the run shows what EXPECT says)."""

import copy

import torch
import transformers

VOCAB = 64


def llama_config(**overrides):
    config = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  attn_implementation="eager", use_cache=False)
    config.update(overrides)
    return transformers.LlamaConfig(**config)


def builder(config=None, seed=0):
    config = config or llama_config()

    def model():
        # A config of its own, as a launcher process has: what one model's
        # parallelize changes in it (a resized vocabulary) is not the next one's.
        torch.manual_seed(seed)
        return transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                             dtype=torch.float64)
    return model


def batch(rows=4, seq=8, seed=1, ignored=None):
    """input_ids and labels; `ignored`: {row: count} of labels set to -100 at the end
    of those rows (tokens the loss does not count)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, seq), generator=g)
    labels = torch.randint(0, VOCAB, (rows, seq), generator=g)
    for row, count in (ignored or {}).items():
        labels[row, seq - count:] = -100

    def inputs():
        return {"input_ids": ids.clone(), "labels": labels.clone()}
    return inputs


def hf_loss(output):
    return output.loss


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=False)


def fsdp(model, dp_mesh, **options):
    """FSDP2 as torchtitan applies it: every block, then the root."""
    from torch.distributed.fsdp import fully_shard
    for layer in model.model.layers:
        fully_shard(layer, mesh=dp_mesh, **options)
    fully_shard(model, mesh=dp_mesh, **options)
    return model


def data_parallel_group(device_mesh, dim="dp"):
    return device_mesh[dim].get_group()


def tp_plan(model):
    """Megatron-style tensor parallelism of a Hugging Face decoder's blocks."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for i, _ in enumerate(model.model.layers):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        plan[p + "mlp.down_proj"] = RowwiseParallel()
    return plan


def tensor_parallel(model, tp_mesh):
    from torch.distributed.tensor.parallel import parallelize_module
    parallelize_module(model, tp_mesh, tp_plan(model))
    return model


def forward_backward(model, batch, scale=1.0):
    """The model's own loss on `batch`, times `scale`, and its backward."""
    loss = model(**batch).loss * scale
    loss.backward()
    return loss


def hf_config(family, **overrides):
    """A tiny config of a Hugging Face model family at its defaults (its own attention
    implementation, activation, norms), 2 layers, width 32 to 64."""
    import transformers
    decoder = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   use_cache=False)
    configs = {
        "llama": lambda: transformers.LlamaConfig(**decoder),
        "qwen2": lambda: transformers.Qwen2Config(**decoder),
        "mistral": lambda: transformers.MistralConfig(**decoder, sliding_window=None),
        "gemma2": lambda: transformers.Gemma2Config(**dict(decoder, head_dim=8),
                                                    query_pre_attn_scalar=8,
                                                    sliding_window=4096),
        "phi3": lambda: transformers.Phi3Config(**decoder, pad_token_id=0),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                n_positions=64, resid_pdrop=0.0,
                                                embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False),
        "mixtral": lambda: transformers.MixtralConfig(**decoder, num_local_experts=4,
                                                      num_experts_per_tok=2,
                                                      router_jitter_noise=0.0,
                                                      sliding_window=None),
        "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**dict(decoder, head_dim=8),
                                                         moe_intermediate_size=32,
                                                         num_experts=4, num_experts_per_tok=2,
                                                         decoder_sparse_step=1),
    }
    config = configs[family]()
    for k, v in overrides.items():
        setattr(config, k, v)
    return config


def family_tp_plan(model, family, qk_norms=True):
    """Tensor parallelism of a Hugging Face decoder's blocks as its own tp_plan does it:
    Megatron-style for separate projections; for fused ones (Phi-3's qkv_proj and
    gate_up_proj, GPT-2's c_attn), the projection split column-wise with its output
    gathered and the next one split row-wise on a replicated input ("colwise_rep",
    "rowwise_rep"); a mixture of experts' block keeps its experts whole."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    if family == "gpt2":
        from loom.torch.hf import conv1d_styles
        colwise, rowwise = conv1d_styles()
        plan = {}
        for i, _ in enumerate(model.transformer.h):
            p = f"transformer.h.{i}."
            plan[p + "attn.c_attn"] = colwise(output_layouts=Replicate())
            plan[p + "attn.c_proj"] = rowwise(input_layouts=Replicate())
            plan[p + "mlp.c_fc"] = colwise()
            plan[p + "mlp.c_proj"] = rowwise()
        return plan
    plan = {}
    for i, _ in enumerate(model.model.layers):
        p = f"model.layers.{i}."
        if family == "phi3":
            plan[p + "self_attn.qkv_proj"] = ColwiseParallel(output_layouts=Replicate())
            plan[p + "self_attn.o_proj"] = RowwiseParallel(input_layouts=Replicate())
            plan[p + "mlp.gate_up_proj"] = ColwiseParallel(output_layouts=Replicate())
            plan[p + "mlp.down_proj"] = RowwiseParallel(input_layouts=Replicate())
            continue
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            plan[p + name] = ColwiseParallel()
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        if qk_norms and family in ("qwen3_moe", "gemma3", "qwen3"):
            # Norms over each head: sharded along the heads dim, their weights'
            # gradients all-reduced.
            from torch.distributed.tensor.parallel import SequenceParallel
            plan[p + "self_attn.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
            plan[p + "self_attn.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        if family not in ("qwen3_moe", "mixtral"):
            plan[p + "mlp.gate_proj"] = ColwiseParallel()
            plan[p + "mlp.up_proj"] = ColwiseParallel()
            plan[p + "mlp.down_proj"] = RowwiseParallel()
    return plan


def family_parallelize(family, how, qk_norms=True):
    """parallelize(module, device_mesh) for `how` in tp, fsdp, tp_fsdp (TP inside
    FSDP2, torchtitan's order)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    def blocks(module):
        return module.transformer.h if family == "gpt2" else module.model.layers

    def parallelize(module, device_mesh):
        if "tp" in how:
            parallelize_module(module, device_mesh["tp"],
                               family_tp_plan(module, family, qk_norms))
        if "fsdp" in how:
            for block in blocks(module):
                fully_shard(block, mesh=device_mesh["dp"])
            fully_shard(module, mesh=device_mesh["dp"])
        return module
    return parallelize


def pipelined(model, device_mesh, schedule, microbatches=4, stages_per_rank=1, loss_fn=None,
              tensor_parallel=False, data_parallel=False, **options):
    """torch.distributed.pipelining as torchtitan applies it to a decoder: the model
    split into stages (hf.DecoderStage: the model with the other stages' layers taken
    out, every parameter keeping its name), `stages_per_rank` per rank of "pp" (loop
    order, or V order for the V schedules), optionally tensor parallel over "tp" and
    FSDP2 over "dp" inside each stage, run by `schedule`."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    from torch.distributed.tensor.parallel import parallelize_module
    from loom.torch import hf
    pp = device_mesh["pp"]
    rank, size = pp.get_local_rank(), pp.size()
    total = size * stages_per_rank
    if stages_per_rank == 1:
        indices = [rank]
    elif "ZBV" in schedule.__name__ or "DualPipeV" in schedule.__name__:
        indices = [rank, total - 1 - rank]
    else:
        indices = [rank + k * size for k in range(stages_per_rank)]
    import copy
    copies = [model] + [copy.deepcopy(model) for _ in indices[1:]]  # one model per stage
    stages = []
    for s, own in zip(indices, copies):
        stage_module = hf.DecoderStage(own, s, total)
        layers = [layer for layer in stage_module.hf.model.layers
                  if not isinstance(layer, hf.Skip)]
        if tensor_parallel:
            for layer in layers:
                parallelize_module(layer, device_mesh["tp"], {
                    k[len("model.layers.0."):]: v
                    for k, v in family_tp_plan(stage_module.hf, "llama").items()
                    if k.startswith("model.layers.0.")})
        if data_parallel:
            for layer in layers:
                fully_shard(layer, mesh=device_mesh["dp"])
            fully_shard(stage_module, mesh=device_mesh["dp"])
        stages.append(PipelineStage(stage_module, s, total, torch.device("cpu"),
                                    group=pp.get_group()))
    fn = loss_fn or hf.causal_lm_loss(stages[-1].submod.hf)
    if issubclass(schedule, PipelineScheduleSingle):
        return schedule(stages[0], microbatches, loss_fn=fn, **options)
    return schedule(stages, microbatches, loss_fn=fn, **options)


def schedule_step(schedule, batch):
    """A pipeline schedule's step on `batch` as torchtitan's trainer calls it: the
    first stage given the inputs, the last the target (and a list for the losses)."""
    stage = schedule._stage
    kwargs = {"input_ids": batch["input_ids"]} if stage.is_first else {}
    target = batch["labels"] if stage.is_last else None
    schedule.step(**kwargs, target=target, losses=[] if stage.is_last else None)


def clip_grad_norm_(parameters, max_norm, pp_group=None, norm_of=None):
    """torchtitan's dist_utils.clip_grad_norm_, norm type 2: the norm of the gradients
    (of DTensor gradients, completed over their ranks by full_tensor), each pipeline
    stage's squared and summed over `pp_group` where one is given, then every gradient
    scaled by max_norm over it (at most 1). `norm_of`: what the norm is taken of, per
    gradient (the gradient itself by default)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm([norm_of(g) for g in grads] if norm_of
                                               else grads, 2.0)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    if pp_group is not None:
        total_norm **= 2.0
        dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=pp_group)
        total_norm **= 1.0 / 2.0
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm
