"""FSDP2 (`fully_shard`) and `replicate`, as the DTensor program they run.

FSDP2's hooks mutate parameter storage in place (all-gather into a flat buffer,
free after use), which a trace cannot follow. What they compute is DTensor's own
vocabulary, and that is what the trace is given instead, per parameter:

- the parameter is FSDP's sharded DTensor (its placements are what FSDP says each
  rank holds: Shard(0) over the data-parallel mesh dim, with TP's placement on the
  others), and the optimizer updates it;
- before the forward it is all-gathered to the placements FSDP computes with
  (Replicate over the data-parallel dims: the unsharded parameter, a DTensor of the
  TP mesh under 2-D parallelism);
- the gradient of that unsharded parameter is each rank's own contribution: DTensor
  Partial over the data-parallel dims, averaged as FSDP reduces gradients (its
  gradient divide factor: the data-parallel size unless set), and redistributed back
  to the sharded placements: a reduce-scatter (an all-reduce for `replicate`).

FSDP's hooks are removed from the module the rank's trace runs.
"""

import dataclasses

import torch

from loom.torch.errors import CaptureError


@dataclasses.dataclass
class ManagedParam:
    fqn: str
    sharded: object        # the sharded DTensor parameter
    dp_dims: tuple          # mesh dims (of the sharded param's mesh) data parallelism uses
    reduce_op: str          # "avg" or "sum": how gradients are reduced over dp_dims
    tp_spec: object = None  # the unsharded parameter's DTensor spec under 2-D parallelism


def _fsdp_states(model):
    from torch.distributed.fsdp import FSDPModule
    states = []
    for module in model.modules():
        if isinstance(module, FSDPModule):
            state = module._get_fsdp_state()
            if state not in states:
                states.append(state)
    return states


def managed_params(model):
    """{fqn: ManagedParam} of every parameter fully_shard or replicate manages in
    `model`, and removes their forward hooks (the trace runs the DTensor form)."""
    paths = {m: n for n, m in model.named_modules()}
    out = {}
    for state in _fsdp_states(model):
        group = state._fsdp_param_group
        for handle in (getattr(state, "_pre_forward_hook_handle", None),
                       getattr(state, "_post_forward_hook_handle", None)):
            if handle is not None:
                handle.remove()
        if group is None:
            continue
        factor = getattr(group, "gradient_divide_factor", None)
        for fp in group.fsdp_params:
            info = fp._module_info
            prefix = paths.get(info.module, "")
            fqn = f"{prefix}.{info.param_name}" if prefix else info.param_name
            sharded = fp.sharded_param
            mesh_info = fp.mesh_info
            mesh = sharded.device_mesh
            dp_dims = _dp_dims(fp, mesh)
            size = 1
            for d in dp_dims:
                size *= mesh.size(d)
            if factor is None:
                reduce_op = "avg" if size > 1 else "sum"
            elif factor == size:
                reduce_op = "avg"
            elif factor == 1:
                reduce_op = "sum"
            else:
                raise CaptureError(f"FSDP gradient divide factor {factor} for '{fqn}' is "
                                   f"neither 1 nor the data-parallel size {size}")
            tp_spec = getattr(fp, "_tp_spec", None) if mesh.ndim > len(dp_dims) else None
            out[fqn] = ManagedParam(fqn, sharded, dp_dims, reduce_op, tp_spec)
            del mesh_info
    return out


def _dp_dims(fp, mesh):
    """The mesh dims of the sharded parameter's mesh that FSDP (or replicate) uses."""
    names = mesh.mesh_dim_names or ()
    dims = []
    info = fp.mesh_info
    for attr in ("replicate_mesh_dim", "shard_mesh_dim"):
        d = getattr(info, attr, None)
        if d is not None and info.mesh is mesh:
            dims.append(d)
    if dims:
        return tuple(sorted(set(dims)))
    dp_mesh = info.mesh
    dp_names = dp_mesh.mesh_dim_names or ()
    for n in dp_names:
        if n in names:
            dims.append(names.index(n))
    if not dims:
        raise CaptureError("cannot tell which mesh dims FSDP shards over")
    return tuple(sorted(dims))


def unsharded_view(param):
    """The function the trace applies to the sharded DTensor parameter: the value the
    module computes with, whose gradient FSDP reduces."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    def view(dt):
        mesh = dt.device_mesh
        placements = list(dt.placements)
        gather = [Replicate() if i in param.dp_dims else p for i, p in enumerate(placements)]
        full = dt.redistribute(mesh, gather)
        grads = [Partial(param.reduce_op) if i in param.dp_dims else p
                 for i, p in enumerate(gather)]
        local = full.to_local(grad_placements=grads)
        if len(param.dp_dims) == mesh.ndim:
            return local
        # 2-D: the unsharded parameter is a DTensor of the other (TP) mesh dims.
        names = mesh.mesh_dim_names
        other = [i for i in range(mesh.ndim) if i not in param.dp_dims]
        sub = mesh[tuple(names[i] for i in other)] if len(other) > 1 else mesh[names[other[0]]]
        return DTensor.from_local(local, sub, [gather[i] for i in other], run_check=False,
                                  shape=dt.shape, stride=dt.stride())
    return view
