"""Data parallelism written by hand in the training step, as many trainers do: the
gradients all-reduced with SUM and divided by the world size, the norm clipped, then
the optimizer's step. Run:

    python -m loom.torch verify examples/torch/ddp_train_step.py
"""

import torch
import torch.distributed as dist
import transformers

mesh = {"dp": 2}


def model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, use_cache=False)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float64)


def inputs():
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, 64, (4, 8), generator=g),
            "labels": torch.randint(0, 64, (4, 8), generator=g)}


def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def parallelize(module, device_mesh):
    return module  # the step synchronises the gradients itself


def train_step(model, optimizer, batch):
    loss = model(**batch).loss
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= dist.get_world_size()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    return loss
