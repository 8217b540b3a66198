"""loom.torch's spec: a PyTorch model's training step captured as Loom's graph."""

import numpy as np
import pytest
import torch

import loom
from loom.torch import KeepFloat64, UnsupportedOp, capture_step

import torch_models


def reference(spec):
    """torch's own step on the captured inputs (casts to float32 kept at float64)."""
    with KeepFloat64():
        inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in spec.trace.inputs]
        return [t.detach().numpy() for t in spec.trace.fn(*inputs)]


def largest_difference(spec, values):
    worst = 0.0
    for name, r in zip(spec.outputs, reference(spec)):
        scale = max(float(np.max(np.abs(r))), 1e-30)
        worst = max(worst, float(np.max(np.abs(values[name] - r))) / scale)
    return worst


@pytest.mark.parametrize("model", ["llama", "gpt2", "qwen2", "mistral"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_graph_computes_torchs_step(model, optimizer):
    # Loom's reference interpreter on the captured graph gives torch's loss, updated
    # parameters and optimizer states.
    spec = capture_step(torch_models.builder(model), torch_models.batch(), torch_models.hf_loss,
                        getattr(torch_models, optimizer))
    assert spec.outputs[0] == "loss"
    assert len(spec.outputs) > 1
    values = loom.evaluate(spec.step, spec.feeds())
    assert largest_difference(spec, values) < 1e-10


def test_outputs_name_the_parameters_and_states():
    # Every parameter's update and AdamW's two moments are outputs, named after them.
    spec = capture_step(torch_models.builder("llama"), torch_models.batch(),
                        torch_models.hf_loss, torch_models.adamw)
    model = torch_models.builder("llama")()
    names = [n for n, _ in model.named_parameters()]
    assert spec.outputs == (["loss"] + [f"{n}.new" for n in names]
                            + [f"{n}.{k}.new" for n in names for k in ("exp_avg", "exp_avg_sq")])


def test_fake_capture_allocates_nothing_and_gives_the_same_graph():
    # At real size the model is built from FakeTensors; the graph is the one a real
    # capture gives.
    real = capture_step(torch_models.builder("llama", torch.float32), torch_models.batch(),
                        torch_models.hf_loss, torch_models.adamw)
    fake = capture_step(torch_models.builder("llama", torch.float32), torch_models.batch(),
                        torch_models.hf_loss, torch_models.adamw, fake=True)
    assert fake.text == real.text
    weights = [ph.value for ph in fake.trace.placeholders if ph.kind != "input"]
    assert weights and all(type(t).__name__ == "FakeTensor" for t in weights)


def test_ops_carry_module_path_and_source_line():
    # Forward and backward ops name the module and the model's source line.
    spec = capture_step(torch_models.builder("llama"), torch_models.batch(),
                        torch_models.hf_loss, torch_models.adamw)
    by_module = {}
    for origin in spec.origins.values():
        by_module.setdefault((origin["module"], origin["phase"]), origin)
    down = by_module[("model.layers.1.mlp.down_proj", "forward")]
    assert down["source"].endswith(".py:" + down["source"].rsplit(":", 1)[1])
    assert "modeling_llama.py" in down["source"]
    assert ("model.layers.1.mlp.down_proj", "backward") in by_module
    assert ("model.layers.1.mlp.down_proj.weight", "optimizer") in by_module


class Cumprod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))

    def forward(self, x):
        return torch.cumprod(x * self.w, dim=0)


def test_an_op_loom_cannot_model_is_refused_at_its_source_line():
    # cumprod has no Loom equivalent: the capture stops naming it and the line.
    with pytest.raises(UnsupportedOp) as e:
        capture_step(Cumprod, lambda: (torch.ones(4, dtype=torch.float64),),
                     lambda y: y.sum(), lambda ps: torch.optim.SGD(ps, lr=0.1))
    message = str(e.value)
    assert "cumprod" in message
    assert "test_torch_spec.py:" in message
