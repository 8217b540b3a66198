"""c10d collectives in the step on one device, and what a c10d op names."""

import torch

from loom.torch.identities import C10D_ALL_REDUCE
from loom.torch.rules import rule

aten = torch.ops.aten


@rule(C10D_ALL_REDUCE)
def _c10d_all_reduce(L, node, tensors, group, op, *rest):
    """An in-place all-reduce (`dist.all_reduce(t)`) in the step on one device: a world
    of one process, where it is the identity (a rank's is a collective: plan.py)."""
    return [list(tensors), None]


def c10d_group_name(module, group_node):
    """The name of the process group a c10d op names (a get_attr of its script
    object), or None."""
    import torch.distributed as dist
    if not isinstance(group_node, torch.fx.Node) or group_node.op != "get_attr":
        return None
    try:
        return dist.ProcessGroup.unbox(getattr(module, group_node.target)).group_name
    except Exception:  # not a process group
        return None


def c10d_reduce_name(module, op_node):
    """'sum', 'avg', 'max', ... of the reduce op a c10d op names."""
    import torch.distributed as dist
    obj = getattr(module, op_node.target, None) if isinstance(op_node, torch.fx.Node) else None
    code = obj.op() if obj is not None and hasattr(obj, "op") else None
    for name in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        if code == getattr(dist.ReduceOp.RedOpType, name).value:
            return name.lower()
    return f"reduce op {code}"
