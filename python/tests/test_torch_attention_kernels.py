"""Scaled dot-product attention in each kernel torch dispatches it to: on the CPU its
flash kernel, on GPUs the flash, memory-efficient and cuDNN kernels. The GPU kernels
have no CPU implementation, so these programs are captured with fake tensors (their
meta kernels give the shapes): each lowers to the same Loom ops as the CPU kernel,
and a tensor-parallel split of its heads is proved."""

import math

import pytest
import torch
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import loom.torch
from loom.torch import UnsupportedOp, capture_step

aten = torch.ops.aten
VOCAB, WIDTH, HEADS = 64, 32, 4

KERNELS = {
    "cpu": lambda q, k, v, p: aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, p, True),
    "flash": lambda q, k, v, p: aten._scaled_dot_product_flash_attention(q, k, v, p, True),
    "efficient": lambda q, k, v, p: aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, p, True),
    "cudnn": lambda q, k, v, p: aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, p, True),
}


class Attention(torch.nn.Module):
    """One causal self-attention block over embeddings, its output projected back to
    the vocabulary; `kernel` names the attention kernel its forward calls."""

    def __init__(self, kernel, dropout=0.0):
        super().__init__()
        self.kernel, self.dropout = kernel, dropout
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.q = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.k = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.v = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.o = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        b, s, _ = x.shape

        def heads(t):  # [b, s, local width] -> [b, local heads, s, head size]
            return t.view(b, s, -1, WIDTH // HEADS).transpose(1, 2)
        out = KERNELS[self.kernel](heads(self.q(x)), heads(self.k(x)), heads(self.v(x)),
                                   self.dropout)[0]
        return self.head(self.o(out.transpose(1, 2).reshape(b, s, -1)))


def loss(logits, batch):
    """The next-token cross-entropy, the mean over the positions that have a next one."""
    ids = batch["input_ids"]
    labels = torch.nn.functional.pad(ids, (0, 1), value=-100)[:, 1:].reshape(-1)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels)


def builder(kernel, dropout=0.0):
    def build():
        torch.manual_seed(0)
        return Attention(kernel, dropout)
    return build


def batch():
    g = torch.Generator().manual_seed(1)
    return {"input_ids": torch.randint(0, VOCAB, (2, 8), generator=g)}



def sgd(params):
    return torch.optim.SGD(params, lr=1e-2)


def ops_of(kernel):
    spec = capture_step(builder(kernel), batch, loss, sgd, fake=True)
    return [(op["kind"], op["attrs"]) for op in spec.lowering.g.ops]


@pytest.mark.parametrize("kernel", ["flash", "efficient", "cudnn"])
def test_a_gpu_kernel_lowers_to_the_cpu_kernels_loom_ops(kernel):
    ops = ops_of(kernel)
    assert ("attention", {"causal": 1, "scale": 1 / math.sqrt(WIDTH // HEADS)}) in ops
    assert [k for k, _ in ops if k.startswith("attention")] == ["attention", "attention_grad"]
    assert ops == ops_of("cpu")


def heads_split(module, device_mesh):
    tp = device_mesh["tp"]
    parallelize_module(module, tp, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                    "v": ColwiseParallel(), "o": RowwiseParallel()})
    return module


@pytest.mark.parametrize("kernel", ["flash", "efficient", "cudnn"])
def test_a_gpu_kernel_with_its_heads_split_over_tensor_parallel_ranks_is_proved(kernel):
    report = loom.torch.verify(model=builder(kernel), parallelize=heads_split, mesh={"tp": 2},
                               inputs=batch, loss=loss, optimizer=sgd, fake=True)
    assert report.verdict == "proved equivalent", report.summary()


def test_attention_dropout_in_a_gpu_kernel_is_refused_with_its_place():
    with pytest.raises(UnsupportedOp, match="attention with dropout 0.1"):
        capture_step(builder("efficient", dropout=0.1), batch, loss, sgd, fake=True)
