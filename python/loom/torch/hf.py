"""Helpers for launching Hugging Face models with torch.distributed, as a launcher
writes them, for loom.torch.verify to check (docs/torch.md):

- DecoderStage: a pipeline stage of a Hugging Face decoder, torchtitan's way (the model
  with the other stages' parts taken out, every parameter keeping its name);
- causal_lm_loss: the model's own loss, as a pipeline schedule's loss function;
- conv1d_styles: column- and row-wise parallel styles for GPT-2's Conv1D layers.
"""

import torch

class Skip(torch.nn.Module):
    """A decoder layer another pipeline stage runs: hands the hidden states on."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


class DecoderStage(torch.nn.Module):
    """Stage `stage` of `stages` of a Hugging Face decoder, torchtitan's way: the model
    itself with the other stages' parts taken out, so that every parameter keeps its
    name. The first stage embeds the ids, the last applies the final norm and the
    head; each runs its share of the layers and returns one tensor."""

    def __init__(self, model, stage, stages):
        super().__init__()
        layers = model.model.layers
        per = len(layers) // stages
        for i in range(len(layers)):
            if not stage * per <= i < (stage + 1) * per:
                layers[i] = Skip()
        self.first, self.last = stage == 0, stage == stages - 1
        if not self.first:
            model.model.embed_tokens = None
        if not self.last:
            model.model.norm = torch.nn.Identity()
            model.lm_head = torch.nn.Identity()
        object.__setattr__(self, "hf", model)
        self._modules = model._modules  # the model's names for its parameters

    def forward(self, x=None, input_ids=None):
        inputs = {"input_ids": input_ids} if self.first else {"inputs_embeds": x}
        if self.last:
            return self.hf(**inputs).logits
        # The hidden states themselves (the head's output would be a view of them,
        # which a zero-bubble schedule's split backward cannot detach).
        return self.hf.model(**inputs).last_hidden_state


def causal_lm_loss(model):
    """The schedule's loss function: Hugging Face's own loss of the model."""
    def loss_fn(logits, labels):
        return model.loss_function(logits=logits, labels=labels,
                                   vocab_size=model.config.vocab_size)
    return loss_fn


def conv1d_styles():
    """Column- and row-wise parallel styles for Hugging Face's Conv1D (GPT-2's linear
    layers, whose weight is [in, out]: the transpose of nn.Linear's), as a launcher
    writes them: torch's styles with the partition of the weight's other dim."""
    from functools import partial
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    def partitioner(weight, bias):
        def partition(name, module, mesh):
            for n, p in module.named_parameters():
                placement = weight if n == "weight" else bias
                module.register_parameter(
                    n, torch.nn.Parameter(distribute_tensor(p, mesh, [placement])))
        return partition

    class ColwiseConv1D(ColwiseParallel):
        def _apply(self, module, device_mesh):
            return distribute_module(
                module, device_mesh, partitioner(Shard(1), Shard(0)),
                partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))

    class RowwiseConv1D(RowwiseParallel):
        def _apply(self, module, device_mesh):
            self.desired_input_layouts = (Shard(-1),)
            return distribute_module(
                module, device_mesh, partitioner(Shard(0), Replicate()),
                partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))

    return ColwiseConv1D, RowwiseConv1D
