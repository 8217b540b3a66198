"""Megatron-LM #7452, finding 2 (https://github.com/NVIDIA/Megatron-LM/issues/7452):
GPTModel's labels path with gathered logits (TP > 1, parallel_output=False or
runtime_gather_output=True) gives a loss equal to the correct one plus log(TP), and
wrong gradients.

The output layer gathers the vocabulary pieces, so every TP rank holds the whole
logits; the loss path still hands them to the vocabulary-parallel cross-entropy,
which takes each rank's logits for its own piece of the vocabulary: the maximum and
the sum of exponentials are all-reduced over TP copies of the same row (TP times the
real sum, hence + log TP), and the target logit is picked from the piece the label
falls in. The torch-level equivalent here: the LM head ColwiseParallel with its output
gathered (output_layouts=Replicate()), and the logits then labelled as the rank's
vocabulary shard (PrepareModuleOutput to Shard(-1)) for torch's loss_parallel, which
the step runs under. In the real run (tp2) the loss is the model's + log 2 (4.8408 for
4.1476) and every gradient differs, by 35 to 95 percent (the softmax halved)."""

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleOutput,
                                               loss_parallel, parallelize_module)

import tiny

EXPECT = {"verdict": "not equivalent"}

mesh = {"tp": 2}
model = tiny.builder()
optimizer = tiny.sgd
train_context = loss_parallel
_batch = tiny.batch()


def inputs():
    """The token ids alone: the loss below predicts each next id (with labels in the
    batch, Hugging Face would compute its own loss inside the forward)."""
    return {"input_ids": _batch()["input_ids"]}


def loss(output, batch):
    """The next-token cross-entropy over the logits' own vocabulary dim (Megatron's
    vocab_parallel_cross_entropy under TP, torch's cross_entropy on one device)."""
    logits = output.logits
    labels = torch.nn.functional.pad(batch["input_ids"], (0, 1), value=-100)[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1), ignore_index=-100)


def parallelize(module, device_mesh):
    tp = device_mesh["tp"]
    tiny.tensor_parallel(module, tp)
    # parallel_output=False: the output layer gathers the logits over the vocabulary.
    parallelize_module(module, tp, {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    # ... while the loss path takes them as this rank's piece of the vocabulary.
    parallelize_module(module, tp, {"lm_head": PrepareModuleOutput(
        output_layouts=Shard(-1), desired_output_layouts=Shard(-1), use_local_output=False)})
    return module
