"""What torch says the values of a rank's program hold, recorded while it is traced.

A rank's trace (capture.trace_step of a parallelized model under a fake process
group) is the program of local tensors torch will run on that rank. The Recorder,
entered inside the trace, joins it to DTensor's own statements:

- every DTensor that an op reads or writes: the FX node of its local tensor gets
  the DTensor's spec (mesh, placements, global shape): what torch says that local
  tensor holds (its claim);
- every redistribution (redistribute_local_tensor, which DTensor runs before an op
  whose inputs are not laid out as its strategy needs, and in `redistribute`):
  the nodes it creates (collectives and the local copies around them) are marked
  as one redistribution, with the spec it starts from and the one it gives;
- the masking of ids to a vocabulary piece and the masked sum that follows
  (DTensor's _MaskPartial, which loss parallel runs outside any redistribution):
  marked the same way, as a MaskWindow;
- the token count of loss parallel's cross-entropy (cross_entropy.Notes).
"""

import contextlib
import dataclasses

import torch
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree as pytree


@dataclasses.dataclass
class Redistribution:
    index: int
    source: object       # DTensorSpec it starts from
    target: object       # DTensorSpec it gives
    input_node: str      # FX node of the local tensor it reads
    output_node: str     # FX node of the local tensor it gives
    nodes: list          # FX nodes it created, in order


@dataclasses.dataclass
class MaskWindow:
    """ids masked to a vocabulary piece ("partition"), or a value summed over the
    pieces after masking ("reduce"), run by a _MaskPartial placement."""
    kind: str            # "partition" or "reduce"
    placement: object    # the _MaskPartial
    mesh: object
    mesh_dim: int
    input_node: str
    output_node: str
    mask_node: str       # the mask a partition keeps ("" for a reduce)


def _node_of(t):
    mode = get_proxy_mode()
    if mode is None or not isinstance(t, torch.Tensor):
        return None
    try:
        slot = get_proxy_slot(t, mode.tracer)
    except (KeyError, AssertionError, RuntimeError):
        return None
    proxy = getattr(slot, "proxy", None)
    return getattr(proxy, "node", None)


def _last_node():
    mode = get_proxy_mode()
    return None if mode is None else mode.tracer.graph._root._prev


def _created_after(last):
    nodes = []
    if last is None:
        return nodes
    graph_root = get_proxy_mode().tracer.graph._root
    n = last._next
    while n is not graph_root:
        nodes.append(n)
        n = n._next
    return nodes


class _SpecMode(TorchDispatchMode):
    def __init__(self, recorder):
        super().__init__()
        self._recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves((args, kwargs, out)):
            self._recorder.note(t)
        return out


class Recorder(contextlib.AbstractContextManager):
    """Entered inside a rank's trace; see the module docstring."""

    def __init__(self):
        self.specs = {}          # FX node name -> DTensorSpec of the local tensor it holds
        self.glue = {}           # FX node name -> index of the redistribution that made it
        self.redistributions = []
        self.aliases = {}        # FX node name -> the node it re-labels (from_local, to_local)
        self.mask_windows = {}   # FX node name of its output -> MaskWindow
        self.notes = None        # the trace's cross_entropy.Notes (set by trace_step)
        self._depth = 0          # redistributions entered
        self._stack = contextlib.ExitStack()

    def note(self, t):
        from torch.distributed.tensor import DTensor
        if isinstance(t, DTensor):
            node = _node_of(t._local_tensor)
            if node is not None:
                self.specs.setdefault(node.name, t._spec)

    def _wrap(self, original):
        def redistribute_local_tensor(local_tensor, current_spec, target_spec, **kwargs):
            last = _last_node()
            self._depth += 1
            try:
                out = original(local_tensor, current_spec, target_spec, **kwargs)
            finally:
                self._depth -= 1
            created = _created_after(last)
            index = len(self.redistributions)
            for n in created:
                self.glue[n.name] = index
            src, dst = _node_of(local_tensor), _node_of(out)
            if src is not None:
                self.specs.setdefault(src.name, current_spec)
            if dst is not None:
                self.specs[dst.name] = target_spec
            self.redistributions.append(Redistribution(
                index, current_spec, target_spec, src.name if src is not None else "",
                dst.name if dst is not None else "", [n.name for n in created]))
            return out
        return redistribute_local_tensor

    def _wrap_mask(self, original, kind):
        """_MaskPartial._partition_value / _reduce_value, run outside a redistribution."""
        def wrapped(placement, tensor, mesh, mesh_dim):
            if self._depth:
                return original(placement, tensor, mesh, mesh_dim)
            last = _last_node()
            src = _node_of(tensor)  # before a reduce masks it in place
            out = original(placement, tensor, mesh, mesh_dim)
            created = _created_after(last)
            for n in created:
                self.glue[n.name] = -1
            dst = _node_of(out)
            mask = _node_of(placement.mask_buffer.data) if kind == "partition" else None
            if src is not None and dst is not None:
                self.mask_windows[dst.name] = MaskWindow(
                    kind, placement, mesh, mesh_dim, src.name, dst.name,
                    mask.name if mask is not None else "")
            return out
        return wrapped

    def _wrap_count(self, original):
        """loss parallel's nll_loss forward: its token count is the sum under the cast."""
        def wrapped(*args, **kwargs):
            result, total_weight = original(*args, **kwargs)
            node = _node_of(total_weight)
            while node is not None and node.target is torch.ops.aten._to_copy.default:
                node = node.args[0]
            if node is not None and self.notes is not None:
                self.notes.counts.add(node.name)
            return result, total_weight
        return wrapped

    def _wrap_alias(self, original, result_local, input_local):
        """A from_local / to_local (or its backward): the value it gives is the one it
        reads, labelled for DTensor or not."""
        def wrapped(*args, **kwargs):
            last = _last_node()
            out = original(*args, **kwargs)
            created = _created_after(last)
            for n in created:
                self.glue[n.name] = -1
            src = _node_of(input_local(args))
            dst = _node_of(result_local(out))
            if src is not None and dst is not None and dst is not src:
                self.aliases[dst.name] = src.name
            return out
        return staticmethod(wrapped)

    def __enter__(self):
        import torch.distributed.tensor._api as api
        import torch.distributed.tensor._dispatch as dispatch
        import torch.distributed.tensor._redistribute as redistribute
        original = redistribute.redistribute_local_tensor
        wrapped = self._wrap(original)
        for module in (redistribute, dispatch, api):
            if getattr(module, "redistribute_local_tensor", None) is original:
                self._stack.callback(setattr, module, "redistribute_local_tensor", original)
                module.redistribute_local_tensor = wrapped
        from torch.distributed.tensor import DTensor

        def local(x):
            return x._local_tensor if isinstance(x, DTensor) else x

        def first(result):
            return local(result[0] if isinstance(result, tuple) else result)

        for cls, method, result_local, input_local in (
                (api._ToTorchTensor, "forward", local, lambda a: local(a[1])),
                (api._ToTorchTensor, "backward", first, lambda a: local(a[1])),
                (api._FromTorchTensor, "forward", local, lambda a: local(a[1])),
                (api._FromTorchTensor, "backward", first, lambda a: local(a[1]))):
            original = cls.__dict__[method]
            self._stack.callback(setattr, cls, method, original)
            setattr(cls, method, self._wrap_alias(original.__func__, result_local, input_local))
        from torch.distributed.tensor.placement_types import _MaskPartial
        for method, kind in (("_partition_value", "partition"), ("_reduce_value", "reduce")):
            original = _MaskPartial.__dict__[method]
            self._stack.callback(setattr, _MaskPartial, method, original)
            setattr(_MaskPartial, method, self._wrap_mask(original, kind))
        import torch.distributed.tensor.parallel.loss as loss_parallel
        original = loss_parallel._nll_loss_forward
        self._stack.callback(setattr, loss_parallel, "_nll_loss_forward", original)
        loss_parallel._nll_loss_forward = self._wrap_count(original)
        self._stack.enter_context(_SpecMode(self))
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False
