"""A torchtitan-style launch of a small Llama: tensor and sequence parallelism over
"tp", then FSDP2 over "dp". Checked before launch with

    python -m loom.torch verify examples/torch/llama_tp_fsdp.py --report r.json --junit v.xml

(docs/torch.md). loom.torch reads the names below; the launcher itself would call
the same functions on the real process group.
"""

import torch
import transformers
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

mesh = {"dp": 2, "tp": 2}

CONFIG = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, attn_implementation="eager",
                                  use_cache=False)


def model():
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(CONFIG, dtype=torch.float64)


def apply_tp(model, tp_mesh):
    parallelize_module(model, tp_mesh, {
        # Hugging Face's decoder reads the sequence length off the hidden states:
        # they stay DTensors (use_local_output=False) between the blocks.
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(),
                                              output_layouts=Shard(1),
                                              use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.model.layers:
        parallelize_module(block, tp_mesh, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1),
                                                use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1),
                                             use_local_output=False),
        })


def apply_fsdp(model, dp_mesh):
    for block in model.model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


def parallelize(model, device_mesh):
    apply_tp(model, device_mesh["tp"])
    apply_fsdp(model, device_mesh["dp"])
    return model


def inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, CONFIG.vocab_size, (4, 16), generator=g)
    return {"input_ids": ids, "labels": ids}


def loss(output):
    return output.loss


def optimizer(params):
    return torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1, foreach=False)
