"""Megatron-LM #7452, finding 1 (https://github.com/NVIDIA/Megatron-LM/issues/7452; also
#737 and #7464): vocab_parallel_cross_entropy with label_smoothing > 0 under TP > 1
averages the log-probabilities over each rank's own piece of the vocabulary: per-rank
loss values differ, and the loss and its gradients are wrong.

Label smoothing mixes the target's negative log-likelihood with the mean negative
log-probability over the whole vocabulary. Megatron computes the log-softmax correctly
across the pieces (maximum and sum of exponentials all-reduced), but then takes
`mean_log_probs = log_probs.mean(dim=-1)` on the rank's local slice and uses it as the
row's mean: nothing all-reduces it. The same at torch level: logits split along the
vocabulary (ColwiseParallel LM head, Shard(-1)), the NLL under torch's loss_parallel,
and the smoothing term's log-probabilities as logits minus their log-sum-exp over the
whole vocabulary (DTensor all-reduces the maximum and the sum) whose mean is taken on
the rank's local slice (to_local) and put back as a replicated value. (Not the mean of
loss_parallel's own log_softmax output: loss_parallel fuses the log-softmax backward
into the NLL's and passes any other gradient of that output through unchanged.) In the
real run (tp2, smoothing 0.1) the two ranks' losses differ from each other (4.14920,
4.14962) and from the model's (4.14941), and so do the gradients."""

import torch
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "missing_reduction"}

mesh = {"tp": 2}
model = tiny.builder()
optimizer = tiny.sgd
train_context = loss_parallel
SMOOTHING = 0.1
_batch = tiny.batch()


def inputs():
    """The token ids alone: the loss below predicts each next id (with labels in the
    batch, Hugging Face would compute its own loss inside the forward)."""
    return {"input_ids": _batch()["input_ids"]}


def loss(output, batch):
    """Cross-entropy with label smoothing, Megatron's way: (1 - a) * NLL + a * the mean
    negative log-probability over the vocabulary, averaged over the tokens."""
    logits = output.logits
    logits = logits.reshape(-1, logits.shape[-1])
    labels = torch.nn.functional.pad(batch["input_ids"], (0, 1), value=-100)[:, 1:].reshape(-1)
    nll = torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(logits, dim=-1),
                                       labels, ignore_index=-100)
    # log_probs = logits - logsumexp(logits): the normaliser over the whole vocabulary
    # (all-reduced across the pieces, as Megatron's sum of exponentials is) ...
    top = torch.amax(logits, dim=-1, keepdim=True).detach()
    lse = torch.log(torch.sum(torch.exp(logits - top), dim=-1)) + top.reshape(-1)
    if isinstance(logits, DTensor):
        lse = lse.to_local()
        local_logits = logits.to_local()
    else:
        local_logits = logits
    # ... but mean_log_probs = log_probs.mean(dim=-1) over the rank's own slice of the
    # vocabulary: the bug.
    mean_log_probs = local_logits.mean(dim=-1) - lse
    counted = (labels != -100).to(mean_log_probs.dtype)
    smooth = -(mean_log_probs * counted).sum() / counted.sum()
    if isinstance(nll, DTensor):
        smooth = DTensor.from_local(smooth, nll.device_mesh, nll.placements, run_check=False)
    return (1 - SMOOTHING) * nll + SMOOTHING * smooth


def parallelize(module, device_mesh):
    tp = device_mesh["tp"]
    tiny.tensor_parallel(module, tp)
    parallelize_module(module, tp, {"lm_head": ColwiseParallel(output_layouts=Shard(-1),
                                                               use_local_output=False)})
    return module
