"""Loom: build a model's training step, plan it over a device mesh, search its
pipeline schedule, prove the plan equivalent to the step, and run it
(docs/python.md). `loom.torch` captures a PyTorch model's own training step and
the per-rank programs torch.distributed runs (docs/torch.md).

The functions and classes are those of the extension module `loom._loom`
(python/loom_module.cc), re-exported here unchanged.
"""

from loom._loom import *  # noqa: F401,F403  (the extension's public names)
from loom._loom import __version__  # noqa: F401
