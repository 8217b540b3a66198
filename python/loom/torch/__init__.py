"""loom.torch: Loom as the pre-launch gate of PyTorch programs (docs/torch.md).

capture_step captures one training step of a torch.nn.Module (forward, loss,
backward and the torch.optim update) as Loom's logical graph, from the model's own
code.
"""

from loom.torch.errors import CaptureError
from loom.torch.lower import UnsupportedOp
from loom.torch.spec import KeepFloat64, Spec, capture_step

__all__ = ["CaptureError", "KeepFloat64", "Spec", "UnsupportedOp", "capture_step"]
