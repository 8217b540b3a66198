"""loom.torch: Loom as the pre-launch gate of PyTorch programs (docs/torch.md).

capture_step captures one training step of a torch.nn.Module (forward, loss,
backward and the torch.optim update) as Loom's logical graph, from the model's own
code; verify captures the per-rank programs torch.distributed runs after the
launcher's own parallelize function and proves them equivalent to that step.
"""

from loom.torch.api import Failure, Report, verify
from loom.torch.errors import CaptureError, LauncherError
from loom.torch.lowered_values import UnsupportedOp
from loom.torch.spec import KeepFloat64, Spec, capture_step
from loom.torch.terminal_status import TerminalStatus

__all__ = ["CaptureError", "Failure", "KeepFloat64", "LauncherError", "Report", "Spec",
           "TerminalStatus", "UnsupportedOp", "capture_step", "verify"]
