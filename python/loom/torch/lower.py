"""Lowering a traced step (capture.Trace) to Loom's logical graph.

Every ATen op the step runs becomes Loom ops with complete schemas (shape rule,
partition signature, reference kernel, symbolic semantics): most one for one
(mm is matmul, silu_backward is silu_grad), some as a few (an in-place AdamW update
is its arithmetic; nll_loss picks, masks, sums and divides). An op with no Loom
meaning stops the lowering with an UnsupportedOp naming the op and the user's
source line: it never passes.

Tensors keep torch's dtypes; casts are Loom `cast` ops (the proof is over the
reals; the executor's precision rounds what it stores). In-place ops become new
values; an in-place update through a view of another tensor, or a read of a
tensor after another alias of it was updated, is refused.
"""

import operator
import os
import re

import torch

from loom.torch import accumulation
from loom.torch.errors import CaptureError
from loom.torch.graph_text import GraphBuilder
from loom.torch.lowered_values import (Empty, MaskedIds, Merged, UnsupportedOp, Value,
                                       VocabMask, _dims, _dtype, _is_fake, _scalar_value)
from loom.torch.rules import RULES, _out
# Each module of loom.torch.rules registers its family's rules.
from loom.torch.rules import (arithmetic, attention, collectives, fills, foreach,  # noqa: F401
                              indexing, reductions, routing, shapes)
from loom.torch.rules.complex import check_complex, complex_mul, is_complex
from loom.torch.rules.foreach import is_foreach_update, lower_foreach

aten = torch.ops.aten


# ---------------------------------------------------------------------------------
# Where an op comes from: module, source line, phase.

_TORCH_DIR = os.path.dirname(torch.__file__)
_LOOM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _frames(stack_trace):
    """(file, line, code) of each frame of an FX stack trace, innermost last."""
    frames = []
    lines = (stack_trace or "").splitlines()
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "([^"]+)", line (\d+), in (.*)', line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frames.append((m.group(1), int(m.group(2)), code))
    return frames


_MACHINERY = ("/fx/", "/_ops.py", "/autograd/", "/utils/", "/nn/modules/module.py",
              "/_functorch/", "/optim/optimizer.py", "/_compile.py", "/_dynamo/",
              "/_subclasses/", "/_library/", "/_prims", "/_refs/", "/_decomp/")


def user_frame_index(files):
    """Which of a stack's files (innermost last) is the user's frame: the innermost
    outside torch and outside Loom; when every frame is inside torch (the optimizer's
    update), the innermost one there that is not tracing machinery. None if none."""
    for i in range(len(files) - 1, -1, -1):
        if not files[i].startswith(_TORCH_DIR) and not files[i].startswith(_LOOM_DIR):
            return i
    for i in range(len(files) - 1, -1, -1):
        if files[i].startswith(_TORCH_DIR) and not any(m in files[i] for m in _MACHINERY):
            return i
    return None


def user_frame(stack_trace):
    """(file, line, code) of the user's frame of an FX stack trace (user_frame_index)."""
    frames = _frames(stack_trace)
    i = user_frame_index([f[0] for f in frames])
    return None if i is None else frames[i]


def short_path(path):
    """A source file as a user reads it: an installed package's file from the package
    on (transformers/models/llama/modeling_llama.py), the user's own relative to the
    working directory when it lies below it."""
    marker = os.sep + "site-packages" + os.sep
    if marker in path:
        return path.split(marker, 1)[1]
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


def layer_of(path):
    m = re.search(r"(?:^|\.)(?:layers|h|blocks|block|layer)\.(\d+)(?:\.|$)", path or "")
    return int(m.group(1)) if m else -1


class Origins:
    """Module path, phase and source of every FX node; a backward node takes its
    forward op's module and source (autograd sequence numbers)."""

    def __init__(self, graph, optimizer_site=None):
        self._optimizer_site = optimizer_site  # (source, code) of the optimizer's builder
        self._forward = {}
        for node in graph.nodes:
            custom = node.meta.get("custom") or {}
            if custom.get("phase") == "forward" and "seq_nr" in node.meta:
                self._forward.setdefault(node.meta["seq_nr"], node)

    def of(self, node, param_of=None):
        custom = node.meta.get("custom") or {}
        phase = custom.get("phase", "forward")
        module = custom.get("module", "")
        stack = node.meta.get("stack_trace")
        if phase == "backward" and not custom.get("own_site"):
            fw = self._forward.get(node.meta.get("seq_nr"))
            if fw is not None:
                module = (fw.meta.get("custom") or {}).get("module", "")
                stack = fw.meta.get("stack_trace") or stack
        if phase == "optimizer" and param_of:
            module = param_of
        frame = user_frame(stack)
        source, code = "", ""
        if phase == "optimizer" and self._optimizer_site:
            # torch's update runs no user code: the line that built the optimizer.
            source, code = self._optimizer_site
        elif frame:
            source, code = f"{short_path(frame[0])}:{frame[1]}", frame[2]
        out = dict(node=node.name, target=str(node.target), phase=phase, module=module,
                   source=source, code=code, action=custom.get("action"))
        if custom.get("schedule_step") is not None:
            out["schedule_step"] = custom["schedule_step"]  # pipeline.driven_step's
        return out


# ---------------------------------------------------------------------------------
# The lowering.


_VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
    aten.transpose.int, aten.permute.default, aten.expand.default, aten.slice.Tensor,
    aten.select.int, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.unsqueeze.default, aten.alias.default, aten.detach.default, aten.as_strided.default,
    aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
}
_IDENTITY_ALIASES = {aten.alias.default, aten.detach.default}


class Lowering:
    def __init__(self, trace, name):
        self.trace = trace
        self.g = GraphBuilder(name)
        self.env = {}
        self.origins = Origins(trace.module.graph, trace.optimizer.get("site"))
        self.storage = {}   # fx node -> storage key
        self.version = {}   # storage key -> version
        self.read_at = {}   # fx node -> version of its storage when it was made
        self.view_base = {}  # fx node -> base node it is a (non-identity) view of
        self.inputs = {}    # Loom input name -> (Placeholder, value)
        self.constants = {}  # Loom input name -> tensor value (tensor constants)
        self.node_param = {}  # fx node -> parameter fqn its optimizer update belongs to
        self.current = None  # the FX node being lowered
        self.origin = None
        self.node_ops = {}  # fx node -> indices of the Loom ops lowering it emitted
        # foreach fx node -> per element, (first, end) of the ops_made() its ops span
        self.foreach_elements = {}
        self.decisions = {}  # fx node -> the shape-dependent choices its rule made
        self.folded = {}     # fx node -> the value of a folded shape-only node
        self.folded_origin = {}  # Loom input name of a folded value -> its op's origin
        self.input_value = {}  # placeholder node -> its input Value

    # ---- emitting ----------------------------------------------------------------
    def emit(self, kind, inputs, attrs, out, hint=None):
        return self.emit_n(kind, inputs, attrs, [out], hint)[0]

    def emit_n(self, kind, inputs, attrs, outs, hint=None):
        origin = self.origin or {}
        phase = origin.get("phase", "forward")
        layer = layer_of(origin.get("module", ""))
        base = hint or (self.current.name if self.current is not None else kind)
        results = [(base, dt, dims, None) for dt, dims in outs]
        names = self.g.op(kind, [v.name for v in inputs], attrs, results, phase, layer,
                          origin=origin)
        return [Value(n, dt, tuple(dims)) for n, (dt, dims) in zip(names, outs)]

    def fill(self, value, dtype, dims=()):
        return self.emit("fill", [], {"shape": list(dims), "value": float(value), "dtype": dtype},
                         (dtype, tuple(dims)), hint=f"{self.current.name}.const")

    def cast(self, v, dtype):
        if v.dtype == dtype:
            return v
        return self.emit("cast", [v], {"dtype": dtype}, (dtype, v.dims),
                         hint=f"{self.current.name}.cast")

    def tensor(self, x, dtype):
        """`x` (a Value or a Python number) as a tensor of `dtype`."""
        if isinstance(x, Value):
            return self.cast(x, dtype)
        if isinstance(x, (bool, int, float)):
            return self.fill(x, dtype)
        raise UnsupportedOp(f"operand {x!r} is not a tensor or a number", self.origin)

    def reshape(self, v, dims):
        dims = tuple(int(d) for d in dims)
        if not self.decide(dims != v.dims):
            return v
        return self.emit("reshape", [v], {"shape": list(dims)}, (v.dtype, dims),
                         hint=f"{self.current.name}.view")

    def decide(self, condition):
        """A choice a rule makes from shapes (emit a reshape, expand this dim, ...).
        The spec's choice is recorded; a rank lowering a piece of that op makes the
        same one (plan.py), so that both give the same ops even where a rank's local
        shapes make a step a no-op (a batch of one row expanded to one row)."""
        self.decisions.setdefault(self.current, []).append(bool(condition))
        return bool(condition)

    def merge(self, x):
        """A Merged value made an ordinary one (a reshape); anything else unchanged."""
        if isinstance(x, Merged):
            return self.reshape(x.value, x.dims)
        if isinstance(x, (list, tuple)):
            return type(x)(self.merge(y) for y in x)
        return x

    def unsupported(self, what):
        raise UnsupportedOp(what, self.origin)

    # ---- the walk -------------------------------------------------------------------
    def fold_constants(self, graph, live):
        """Shape-only values the program reads, computed (constants.py): the folded
        node -> its value, and the live set with their ancestors left out."""
        from loom.torch import constants
        concrete = self.concrete_data(graph)
        nodes = constants.foldable(graph, live, concrete)
        values = constants.evaluate(self.trace.module, nodes, concrete)
        folded = {n: v for n, v in values.items() if v is not None}
        return folded, self._live(graph, graph.output_node(), stop=set(folded))

    def concrete_data(self, graph):
        """The batch's integer tensors the trace was given, with their values
        (constants.py folds the scalars computed from them alone, such as a loss's
        token count); a rank standing in with another's trace reads its own."""
        from loom.torch import constants
        return constants.concrete_data(graph, self.trace.placeholders,
                                       getattr(self, "data", None))

    def run(self):
        graph = self.trace.module.graph
        output_node = graph.output_node()
        live = self._live(graph, output_node)
        self.folded, live = self.fold_constants(graph, live)
        self.chains = accumulation.Chains(graph)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.trace.placeholders):
            raise CaptureError("the trace's inputs do not match the step's")
        self._name_outputs(output_node)
        for node, ph in zip(placeholders, self.trace.placeholders):
            self._placeholder(node, ph, live)
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            self.current = node
            self.origin = self.origins.of(node, self.node_param.get(node))
            mutated = self._mutated(node)
            if node not in live:
                if mutated is not None:  # a dead update still changes its tensor
                    self._bump(mutated)
                continue
            self._check_fresh(node)
            if node in self.folded:
                self.env[node] = self._folded(node)
                self.node_ops[node] = []
                self._track(node, None)
                continue
            if node.op == "get_attr":
                first = len(self.g.ops)
                self.env[node] = self._constant(node)
                self.node_ops[node] = list(range(first, len(self.g.ops)))
                self._track(node, None)
                continue
            if node.op != "call_function":
                self.unsupported(f"FX node '{node.op}' ({node.target})")
            if node in self.chains.inner:
                # A gradient accumulated further by the next backward call: the chain's
                # last link lowers all of it (accumulation.py).
                self.env[node] = None
                self.node_ops[node] = []
                self._track(node, mutated)
                continue
            first = len(self.g.ops)
            if node in self.chains.terms:
                result = accumulation.lower_step_chain(self, self.chains.terms[node],
                                                       _out(node))
            else:
                result = self._lower(node)
            self.node_ops[node] = list(range(first, len(self.g.ops)))
            self.env[node] = result
            self._track(node, mutated)
        outs = [self.env[n] if isinstance(n, torch.fx.Node) else None
                for n in output_node.args[0]]
        return outs

    def _live(self, graph, output_node, stop=()):
        """The nodes the outputs depend on, and the in-place list updates (a foreach
        optimizer's) of any of them, which FX leaves out of the data flow: their
        results are the lists they update."""
        live = set()
        updates = [n for n in graph.nodes if is_foreach_update(n)]

        def walk(start):
            stack = [start]
            while stack:
                n = stack.pop()
                if n in stop:
                    continue
                for a in n.all_input_nodes:
                    if a not in live:
                        live.add(a)
                        stack.append(a)
        walk(output_node)
        grown = True
        while grown:
            grown = False
            for n in updates:
                if n not in live and any(a in live for a in n.args[0]):
                    live.add(n)
                    walk(n)
                    grown = True
        return live

    def _folded(self, node):
        """A folded shape-only value: an input of the graph holding it."""
        value = self.folded[node]
        dtype = _dtype(value, self.origin)
        name = self.g.input(self.g.fresh(f"const.{node.name}"), dtype, tuple(value.shape),
                            "input")
        self.constants[name] = value
        self.folded_origin[name] = self.origin
        return Value(name, dtype, tuple(value.shape))

    def _name_outputs(self, output_node):
        # Which parameter each optimizer-phase node updates: the one its inputs lead
        # back to (a parameter, its gradient or its state).
        param_of_input = {}
        for node, ph in zip([n for n in output_node.graph.nodes if n.op == "placeholder"],
                            self.trace.placeholders):
            if ph.kind in ("parameter", "state"):
                param_of_input[node] = ph.fqn
        for n, (kind, name) in zip(output_node.args[0], self.trace.outputs):
            if kind in ("parameter", "state") and isinstance(n, torch.fx.Node):
                fqn = name if kind == "parameter" else name.rsplit(".", 1)[0]
                self._mark_param(n, fqn)

    def _mark_param(self, node, fqn):
        stack = [node]
        while stack:
            n = stack.pop()
            custom = n.meta.get("custom") or {}
            if custom.get("phase") != "optimizer" or n in self.node_param:
                continue
            self.node_param[n] = fqn
            stack.extend(n.all_input_nodes)

    def _placeholder(self, node, ph, live):
        val = node.meta.get("val")
        dtype = _dtype(val, {"module": ph.fqn})
        role = {"parameter": "parameter", "buffer": "input", "state": "state",
                "input": "input"}[ph.kind]
        name = self.g.input(ph.name, dtype, _dims(val), role)
        self.inputs[name] = ph
        self.env[node] = Value(name, dtype, _dims(val))
        self.input_value[node] = self.env[node]  # env may be rebound (a foreach update)
        self.storage[node] = node
        self.version[node] = 0
        self.read_at[node] = 0

    def _constant(self, node):
        t = getattr(self.trace.module, node.target)
        if isinstance(t, torch.ScriptObject):
            return t  # a process group or a reduce op a c10d collective names
        if not isinstance(t, torch.Tensor):
            self.unsupported(f"constant {node.target} of type {type(t).__name__}")
        dtype = _dtype(t, self.origin)
        if t.numel() == 1 and t.dim() == 0:
            value = _scalar_value(t)
            if value is None:
                self.unsupported("a scalar tensor constant whose value the fake trace does "
                                 "not know")
            return self.fill(value, dtype, ())
        if _is_fake(t):
            self.unsupported(f"a tensor constant of shape {list(t.shape)} created inside the "
                             "model's code (its values are unknown in a fake trace)")
        name = self.g.input(self.g.fresh(f"constant.{node.target}"), dtype, tuple(t.shape),
                            "input")
        self.constants[name] = t.detach()
        return Value(name, dtype, tuple(t.shape))

    # ---- in-place updates and aliases ----------------------------------------------
    def _mutated(self, node):
        """The FX node whose tensor `node` updates in place, or None."""
        if node.op != "call_function" or not hasattr(node.target, "_schema"):
            return None
        schema = node.target._schema
        if schema.name.endswith("_") or any(a.alias_info and a.alias_info.is_write
                                            for a in schema.arguments):
            first = node.args[0] if node.args else None
            return first if isinstance(first, torch.fx.Node) else None
        return None

    def _storage(self, n):
        return self.storage.get(n, n)

    def _bump(self, target):
        key = self._storage(target)
        self.version[key] = self.version.get(key, 0) + 1

    def _check_fresh(self, node):
        for a in node.all_input_nodes:
            key = self._storage(a)
            if self.read_at.get(a, 0) != self.version.get(key, 0):
                self.unsupported(f"'{node.target}' reads a tensor after an in-place update "
                                 "through another alias of it")

    def _track(self, node, mutated):
        if mutated is not None:
            # An update through a view changes its base too: every later read of the
            # base or another view of it is refused (_check_fresh), the view's own
            # new value is this node's.
            key = self._storage(mutated)
            self._bump(mutated)
            self.storage[node] = key
            self.read_at[node] = self.version[key]
            return
        if node.op == "call_function" and node.target in _VIEW_OPS and node.args and \
                isinstance(node.args[0], torch.fx.Node):
            base = node.args[0]
            key = self._storage(base)
            self.storage[node] = key
            self.read_at[node] = self.version.get(key, 0)
            if node.target not in _IDENTITY_ALIASES:
                self.view_base[node] = base
            elif base in self.view_base:
                self.view_base[node] = self.view_base[base]
            return
        self.storage[node] = node
        self.version[node] = 0
        self.read_at[node] = 0

    # ---- one node ----------------------------------------------------------------------
    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        return a

    def _lower(self, node):
        target = node.target
        args = [self._arg(a) for a in node.args]
        kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
        if target not in _MERGE_AWARE:
            args = [self.merge(a) for a in args]
            kwargs = {k: self.merge(v) for k, v in kwargs.items()}
        if target not in _MASK_AWARE and any(isinstance(a, MaskedIds) for a in args):
            self.unsupported(f"'{target}' reads ids masked for a vocabulary piece")
        if target not in _MASK_AWARE and any(isinstance(a, VocabMask) for a in args):
            self.unsupported(f"'{target}' reads the mask of a vocabulary piece")
        if target not in (aten.cat.default, aten.slice_backward.default) and \
                any(isinstance(a, Empty) for a in args):
            self.unsupported(f"'{target}' reads a tensor with no elements")
        if target is operator.getitem:
            seq, i = args
            if not isinstance(seq, (list, tuple)):
                self.unsupported("getitem of a single tensor")
            return seq[i]
        if is_complex(node) or any(is_complex(a) for a in node.all_input_nodes):
            check_complex(self, node)
            if target is aten.mul.Tensor:
                return complex_mul(self, node, *args)
        rule = RULES.get(target)
        if rule is None:
            rule = RULES.get(getattr(target, "overloadpacket", None))
        if rule is None and getattr(target, "__name__", "").startswith("_foreach_"):
            return lower_foreach(self, node, args, kwargs)
        if rule is None:
            self.unsupported(f"op '{target}' has no Loom equivalent")
        return rule(self, node, *args, **kwargs)

    def rebind(self, node, value):
        """`node`'s tensor updated in place by a foreach op: its value from now on."""
        self.env[node] = value

    def ops_made(self):
        """How many Loom ops the lowering has emitted (a foreach op's elements are
        told apart by it: foreach_elements)."""
        return len(self.g.ops)


# Rules that take Merged operands (the others see them merged).
_MERGE_AWARE = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                aten.transpose.int, aten.bmm.default,
                # Copies and re-labels keep it as it is (a rank's lowering aliases them).
                aten.detach.default, aten.alias.default, aten.clone.default,
                aten.contiguous.default, aten.lift_fresh_copy.default, aten.lift_fresh.default}
# Rules that take MaskedIds operands.
_MASK_AWARE = {aten.embedding.default, aten.embedding_dense_backward.default,
               aten.gather.default, aten.index_put_.default, aten.index_put.default}


def lower_trace(trace, name):
    """The Loom graph of a traced step: (GraphBuilder, Lowering) with the graph's
    outputs set (the loss, then every updated parameter and optimizer state)."""
    L = Lowering(trace, name)
    outs = L.run()
    names = []
    produced = {n for op in L.g.ops for n in op["outputs"]}
    for (kind, name), v in zip(trace.outputs, outs):
        if not isinstance(v, Value):
            raise CaptureError(f"the step's {kind} output is not a tensor")
        role = {"loss": "loss", "parameter": "parameter", "state": "state"}[kind]
        out_name = v.name
        if v.name in produced and v.name not in names:
            # The loss, and each update named after what it updates.
            wanted = "loss" if kind == "loss" else f"{name}.new"
            if wanted not in L.g.types:
                L.g.rename(v.name, wanted)
                out_name = wanted
            L.g.roles[out_name] = role
        names.append(out_name)
    for op in L.g.ops:
        for n in op["outputs"]:
            if L.g.roles[n] == "activation" and op["phase"] != "forward":
                L.g.roles[n] = "gradient"
    L.g.set_outputs(names)
    return L
