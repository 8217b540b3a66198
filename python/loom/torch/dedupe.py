"""One node for each value the model's step computes more than once.

A traced step computes some values many times over: Hugging Face's attention
unsqueezes the rotary tables in every layer, each micro-batch of a pipelined step
rebuilds the same positions and masks. A rank that runs only some layers or some
micro-batches computes only some of the copies, and matching its ops to the step's by
data flow cannot tell which copy it computed; they are the same value. The step's
graph is therefore reduced to one node per distinct computation (common
subexpressions merged) before it is lowered: a pure ATen op on the same operands
with the same arguments is the same value.

Ops that write their operands, draw random numbers, allocate uninitialized memory,
communicate or have other effects are never merged.
"""

import torch

aten = torch.ops.aten

_EFFECTS = ("rand", "normal", "bernoulli", "dropout", "uniform", "exponential", "poisson",
            "multinomial", "empty", "_record_function", "set_", "copy_", "resize")


def _pure(node):
    if node.op != "call_function":
        return False
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    name = schema.name
    if not name.startswith("aten::") or any(e in name for e in _EFFECTS):
        return False
    if name.endswith("_") or any(a.alias_info is not None and a.alias_info.is_write
                                 for a in schema.arguments):
        return False
    return not schema.is_mutable


_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
          aten.transpose.int, aten.permute.default, aten.expand.default, aten.slice.Tensor,
          aten.select.int, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
          aten.unsqueeze.default, aten.alias.default, aten.detach.default,
          aten.as_strided.default, aten.split.Tensor, aten.split_with_sizes.default,
          aten.unbind.int, aten.diagonal.default, aten.unfold.default}


def _writes(node):
    if node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    return schema.name.endswith("_") or schema.is_mutable or any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _storages(graph):
    """(root, written): each node's storage (the node a chain of views and in-place
    writes starts from) and the storages some op writes in place."""
    root = {}
    written = set()
    for node in graph.nodes:
        if node.op == "call_function" and (node.target in _VIEWS or _writes(node)) and \
                node.args and isinstance(node.args[0], torch.fx.Node):
            root[node] = root.get(node.args[0], node.args[0])
            if _writes(node):
                written.add(root[node])
    return root, written


def _freeze(x, rep):
    if isinstance(x, torch.fx.Node):
        return ("node", rep[x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_freeze(y, rep) for y in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((k, _freeze(v, rep)) for k, v in x.items())))
    if isinstance(x, float) and x != x:
        return ("nan",)
    if isinstance(x, (int, float, bool, str, type(None), torch.dtype, torch.device,
                      torch.layout, torch.memory_format)):
        return (type(x).__name__, x)
    return ("object", id(x))  # anything else: its own value only


def _scalar_constant(module, node):
    """("constant", dtype, value) of a get_attr of a tensor of one element, or None."""
    if node.op != "get_attr":
        return None
    t = getattr(module, node.target, None)
    if not isinstance(t, torch.Tensor) or t.dim() != 0 or t.is_complex():
        return None
    value = t.item()
    if isinstance(value, float) and value != value:
        value = "nan"
    return ("constant", t.dtype, value)


def dedupe(module):
    """Merges `module`'s repeated pure computations in place; returns the name of
    each node removed -> the name of the node that stands for it."""
    graph = module.graph
    rep = {}
    seen = {}
    removed = {}
    root, written = _storages(graph)
    version = {}  # storage -> in-place writes to it so far
    for node in list(graph.nodes):
        rep[node] = node
        if _writes(node) and node in root:
            version[root[node]] = version.get(root[node], 0) + 1
        scalar = _scalar_constant(module, node)
        if scalar is not None and node not in written:
            # A scalar constant a loop's copies each hold (a loss's -1 for its
            # targets, in every micro-batch): one node per value.
            first = seen.setdefault(scalar, node)
            if first is not node:
                node.replace_all_uses_with(first)
                rep[node] = first
                removed[node.name] = first.name
                graph.erase_node(node)
            continue
        if not _pure(node):
            continue
        # A value whose own storage is written later is never merged (two copies
        # are two tensors); one that reads a storage written somewhere is merged only
        # with a read of the same version of it (no write between the two: a
        # micro-batch loop's reads of the weights before the optimizer's update).
        own = root.get(node, node)
        if own in written and node.target not in _VIEWS:
            continue
        stamps = tuple(version.get(root.get(a, a), 0) for a in node.all_input_nodes
                       if root.get(a, a) in written)
        key = (node.target, _freeze(node.args, rep), _freeze(node.kwargs, rep), stamps)
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        a, b = first.meta.get("val"), node.meta.get("val")
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
                a.shape == b.shape and a.dtype == b.dtype):
            continue
        node.replace_all_uses_with(first)
        rep[node] = first
        removed[node.name] = first.name
        graph.erase_node(node)
    if removed:
        module.recompile()
    return removed
