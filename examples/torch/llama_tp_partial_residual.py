"""A planted bug, as it happens: tensor parallelism whose last down projection is
left a partial sum (RowwiseParallel with output_layouts=Partial()) where it meets
the residual. `python -m loom.torch verify` exits 1 and names the module and line.
"""

from torch.distributed.tensor import Partial, Replicate
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from llama_tp_fsdp import inputs, loss, model, optimizer  # noqa: F401

mesh = {"tp": 2}


def parallelize(model, device_mesh):
    last = len(model.model.layers) - 1
    for i, block in enumerate(model.model.layers):
        parallelize_module(block, device_mesh["tp"], {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(
                output_layouts=Partial() if i == last else Replicate()),
        })
    return model
