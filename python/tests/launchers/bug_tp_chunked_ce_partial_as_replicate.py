"""torchtitan PR #3418 (https://github.com/pytorch/torchtitan/pull/3418, the fix of
ChunkedCELoss under TP, also #3412): a chunked cross-entropy under tensor parallelism
labelled the gradient it accumulated with the wrong placement, and the loss curve ran
well above the single-GPU baseline.

ChunkedCELoss runs the LM head and the loss one sequence chunk at a time on a detached
copy of the decoder's output, accumulates each chunk's input gradient in a buffer
(GradAccumulator: `chunk_grad.to_local()` into a buffer), then backpropagates the decoder with
`(hidden_states * accumulated_grad).sum().backward()`. The buffer was wrapped with the
decoder output's placement, Replicate; but with a ColwiseParallel LM head (its weight
split along the vocabulary, its input replicated) each chunk's gradient comes back
Partial(sum) over the TP ranks, and to_local() returns each rank's share. Labelled
Replicate, the shares reach the decoder's backward as if complete: no all-reduce ever
sums them. Here the same on a tiny Llama under tp2 (the LM head's logits gathered, two
chunks of the sequence, the summed loss over the batch's tokens): in the real run the
decoder's gradients are off (by up to their own size) and the two ranks' copies of the
embedding and the final norm disagree."""

import torch
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

import tiny

EXPECT = {"verdict": "not equivalent", "cls": "missing_reduction"}

mesh = {"tp": 2}
model = tiny.builder()
inputs = tiny.batch()
optimizer = tiny.sgd
CHUNKS = 2

TOKENS = int((inputs()["labels"][:, 1:] != -100).sum())


def parallelize(module, device_mesh):
    tiny.tensor_parallel(module, device_mesh["tp"])
    parallelize_module(module, device_mesh["tp"],
                       {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    return module


def train_step(model, optimizer, batch):
    hidden = model.model(input_ids=batch["input_ids"]).last_hidden_state
    labels = torch.nn.functional.pad(batch["labels"], (0, 1), value=-100)[:, 1:]
    weight = model.lm_head.weight
    mesh = weight.device_mesh if isinstance(weight, DTensor) else None
    accumulated = None
    for h_chunk, l_chunk in zip(hidden.chunk(CHUNKS, dim=1), labels.chunk(CHUNKS, dim=1)):
        # The chunk's detached activation, a DTensor as torchtitan's decoder output is.
        h = h_chunk.detach()
        if mesh is not None:
            h = DTensor.from_local(h, mesh, [Replicate()], run_check=False)
        h.requires_grad_()
        logits = model.lm_head(h)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), l_chunk.reshape(-1),
            ignore_index=-100, reduction="sum") / TOKENS
        loss.backward()
        grad = h.grad
        if isinstance(grad, DTensor):
            # GradAccumulator: the local values of a Partial(sum) gradient, kept as if
            # they were the Replicate activation's.
            grad = grad.to_local()
        accumulated = grad if accumulated is None else torch.cat([accumulated, grad], dim=1)
    decoder_loss = (hidden * accumulated).sum()
    decoder_loss.backward()
    optimizer.step()
