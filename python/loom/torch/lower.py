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

import dataclasses
import math
import operator
import os
import re

import torch

from loom.torch import accumulation
from loom.torch.identities import C10D_ALL_REDUCE, canonical
from loom.torch.errors import CaptureError
from loom.torch.graph_text import GraphBuilder

aten = torch.ops.aten

DTYPES = {
    torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
    torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
}
FLOAT = ("f64", "f32", "bf16", "f16")
# Complex tensors are held as their real views (_dims), of the parts' dtype.
COMPLEX = {torch.complex64: "f32", torch.complex128: "f64"}


class UnsupportedOp(CaptureError):
    """An op the lowering has no Loom meaning for."""

    def __init__(self, message, origin=None):
        where = ""
        if origin:
            parts = [p for p in (origin.get("source"), origin.get("module")) if p]
            if parts:
                where = " (" + ", ".join(parts) + ")"
        super().__init__(message + where)
        self.origin = origin or {}


@dataclasses.dataclass(frozen=True)
class Value:
    """A tensor of the Loom graph being built."""
    name: str
    dtype: str
    dims: tuple


@dataclasses.dataclass(frozen=True)
class VocabMask:
    """The mask DTensor keeps for ids read against a vocabulary piece (True where an id
    lies outside it), and what torch's loss-parallel backward makes of it: cast to
    the gradient's dtype, less one, it is -1 at the rows whose id the piece holds.
    Loom's pick_grad with the piece's `vocab_begin` writes only those rows, so there
    the update is a plain -1 (`minus_one`)."""
    ids: object          # the MaskedIds it masks
    dtype: str = "bool"
    minus_one: bool = False


@dataclasses.dataclass(frozen=True)
class MaskedIds:
    """Ids read against a vocabulary piece [begin, begin + size) of a table split over
    ranks (DTensor's _MaskPartial): torch rewrites them to the piece's rows and masks
    the others; Loom's embedding ops take the ids as they are and the piece's
    `vocab_begin`, which they mask themselves."""
    value: Value
    begin: int
    size: int

    @property
    def dims(self):
        return self.value.dims

    @property
    def dtype(self):
        return self.value.dtype


@dataclasses.dataclass(frozen=True)
class Merged:
    """A view that merges the first `lead` dims of `value` into one, kept unmerged.

    torch.matmul of tensors with several batch dims merges them for bmm (a view to
    [b * h, m, k]), multiplies, and views the result back. A piece of such a merged
    dim whose inner dim is split (heads under tensor parallelism) is no box of the
    merged tensor, so the lowering keeps the batch dims apart instead: a transpose of
    the last two dims and a bmm act on the unmerged value (a batched matmul), and the
    view back gives it. Any other use merges it (a reshape)."""
    value: Value
    lead: int

    @property
    def dims(self):
        d = self.value.dims
        merged = 1
        for x in d[:self.lead]:
            merged *= x
        return (merged,) + tuple(d[self.lead:])

    @property
    def dtype(self):
        return self.value.dtype


@dataclasses.dataclass(frozen=True)
class Empty:
    """A tensor with no elements (Phi-3's pass-through part of a rotary embedding that
    covers the whole head): no Loom value. A concat leaves it out; the gradient of it
    is zeros."""
    dtype: str
    dims: tuple


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
        return dict(node=node.name, target=str(node.target), phase=phase, module=module,
                    source=source, code=code, action=custom.get("action"))


# ---------------------------------------------------------------------------------
# The lowering.

def _dims(val):
    """A tensor's dims as Loom holds it: a complex tensor as its real view
    (torch.view_as_real: its real and imaginary parts along a last dim of 2)."""
    dims = tuple(int(d) for d in val.shape)
    return dims + (2,) if val.dtype in COMPLEX else dims


def _dtype(val, origin=None):
    dt = DTYPES.get(val.dtype) or COMPLEX.get(val.dtype)
    if dt is None:
        raise UnsupportedOp(f"dtype {val.dtype} has no Loom dtype", origin)
    return dt


def _norm_dim(d, rank):
    return d + rank if d < 0 else d


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


def _is_fake(t):
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _scalar_value(t):
    if _is_fake(t):
        c = getattr(t, "constant", None)
        return None if c is None else c.item()
    return t.item()


# ---------------------------------------------------------------------------------
# Rules: one function per ATen op (overload), returning a Value, a list of Values,
# or a Python number.

RULES = {}


def rule(*targets):
    def register(fn):
        for t in targets:
            RULES[t] = fn
        return fn
    return register


def _out(node):
    val = node.meta["val"]
    return _dtype(val), _dims(val)


@rule(aten.detach.default, aten.alias.default, aten.clone.default, aten.lift_fresh_copy.default,
      aten.contiguous.default, aten.lift_fresh.default)
def _identity(L, node, x, *args, **kwargs):
    return x


@rule(aten._to_copy.default)
def _to_copy(L, node, x, **kwargs):
    dtype, dims = _out(node)
    return L.cast(x, dtype)


@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
      aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
      aten.flatten.using_ints)
def _view(L, node, x, *args, **kwargs):
    dtype, dims = _out(node)
    if isinstance(x, Merged):
        if L.decide(tuple(x.value.dims) == tuple(dims)):
            return x.value  # the view back of a batched matmul's result
        x = L.merge(x)
    if node.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        lead = len(x.dims) - 2
        merged = 1
        for d in x.dims[:max(lead, 0)]:
            merged *= d
        if L.decide(lead >= 2 and tuple(dims) == (merged,) + tuple(x.dims[lead:])):
            return Merged(x, lead)
    return L.reshape(x, dims)


@rule(aten.t.default)
def _t(L, node, x):
    if len(x.dims) < 2:
        return x
    dtype, dims = _out(node)
    return L.emit("transpose", [x], {"perm": [1, 0]}, (dtype, dims))


@rule(aten.transpose.int)
def _transpose(L, node, x, d0, d1):
    if isinstance(x, Merged):
        rank = len(x.dims)
        d0, d1 = _norm_dim(d0, rank), _norm_dim(d1, rank)
        if min(d0, d1) >= 1:
            inner = x.value
            shift = x.lead - 1
            perm = list(range(len(inner.dims)))
            perm[d0 + shift], perm[d1 + shift] = perm[d1 + shift], perm[d0 + shift]
            dims = list(inner.dims)
            dims[d0 + shift], dims[d1 + shift] = dims[d1 + shift], dims[d0 + shift]
            out = L.emit("transpose", [inner], {"perm": perm}, (inner.dtype, tuple(dims)))
            return Merged(out, x.lead)
        x = L.merge(x)
    rank = len(x.dims)
    d0, d1 = _norm_dim(d0, rank), _norm_dim(d1, rank)
    if d0 == d1:
        return x
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return L.emit("transpose", [x], {"perm": perm}, _out(node))


@rule(aten.permute.default)
def _permute(L, node, x, dims):
    perm = [_norm_dim(d, len(x.dims)) for d in dims]
    if perm == list(range(len(x.dims))):
        return x
    return L.emit("transpose", [x], {"perm": perm}, _out(node))


@rule(aten.expand.default)
def _expand(L, node, x, sizes, **kwargs):
    dtype, dims = _out(node)
    rank = len(dims)
    v = L.reshape(x, (1,) * (rank - len(x.dims)) + tuple(x.dims))
    for d in range(rank):
        if L.decide(v.dims[d] != dims[d]):
            if v.dims[d] != 1:
                L.unsupported(f"expand of dim {d} from {v.dims[d]} to {dims[d]}")
            new = list(v.dims)
            new[d] = dims[d]
            v = L.emit("expand", [v], {"dim": d, "size": dims[d]}, (dtype, tuple(new)))
    return v


def _slice_bounds(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@rule(aten.slice.Tensor)
def _slice(L, node, x, dim=0, start=None, end=None, step=1):
    d = _norm_dim(dim, len(x.dims))
    b, e, step = _slice_bounds(x.dims[d], start, end, step)
    if step != 1:
        L.unsupported(f"slice with step {step}")
    if e <= b:
        return Empty(*_out(node))
    if not L.decide(b != 0 or e != x.dims[d]):
        return x
    return L.emit("slice", [x], {"dim": d, "begin": b, "end": e}, _out(node))


@rule(aten.select.int)
def _select(L, node, x, dim, index):
    d = _norm_dim(dim, len(x.dims))
    i = index + x.dims[d] if index < 0 else index
    dims = list(x.dims)
    dims[d] = 1
    piece = x
    if L.decide(x.dims[d] != 1):
        piece = L.emit("slice", [x], {"dim": d, "begin": i, "end": i + 1},
                       (x.dtype, tuple(dims)))
    return L.reshape(piece, _out(node)[1])


@rule(aten.cat.default)
def _cat(L, node, tensors, dim=0):
    parts = [t for t in tensors if not isinstance(t, Empty) and 0 not in t.dims]
    dtype, dims = _out(node)
    parts = [L.cast(p, dtype) for p in parts]
    if not L.decide(len(parts) != 1):
        return parts[0]
    d = _norm_dim(dim, len(dims))
    return L.emit("concat", parts, {"dim": d}, (dtype, dims))


@rule(aten.stack.default)
def _stack(L, node, tensors, dim=0):
    dtype, dims = _out(node)
    d = _norm_dim(dim, len(dims))
    parts = []
    for t in tensors:
        shape = list(t.dims)
        shape.insert(d, 1)
        parts.append(L.reshape(L.cast(t, dtype), shape))
    if not L.decide(len(parts) != 1):
        return parts[0]
    return L.emit("concat", parts, {"dim": d}, (dtype, dims))


@rule(aten.split.Tensor, aten.split_with_sizes.default)
def _split(L, node, x, split, dim=0):
    d = _norm_dim(dim, len(x.dims))
    size = x.dims[d]
    if isinstance(split, int):
        sizes = [split] * (size // split) + ([size % split] if size % split else [])
    else:
        sizes = list(split)
    if not L.decide(len(sizes) != 1):
        return [x]
    outs = []
    for s in sizes:
        dims = list(x.dims)
        dims[d] = s
        outs.append((x.dtype, tuple(dims)))
    return L.emit_n("split", [x], {"dim": d, "sizes": sizes}, outs)


@rule(aten.select_backward.default)
def _select_backward(L, node, grad, input_sizes, dim, index):
    dtype, dims = _out(node)
    d = _norm_dim(dim, len(dims))
    i = index + dims[d] if index < 0 else index
    shape = list(grad.dims)
    shape.insert(d, 1)
    v = L.reshape(grad, shape)
    return L.emit("pad", [v], {"dim": d, "before": i, "after": dims[d] - i - 1}, _out(node))


@rule(aten.slice_backward.default)
def _slice_backward(L, node, grad, input_sizes, dim, start, end, step):
    d = _norm_dim(dim, len(input_sizes))
    b, e, step = _slice_bounds(input_sizes[d], start, end, step)
    if step != 1:
        L.unsupported(f"slice_backward with step {step}")
    before, after = b, input_sizes[d] - e
    if isinstance(grad, Empty):
        return _fill_like(L, node, 0.0)
    if not L.decide(before != 0 or after != 0):
        return grad
    return L.emit("pad", [grad], {"dim": d, "before": before, "after": after}, _out(node))


@rule(aten.constant_pad_nd.default)
def _constant_pad(L, node, x, pad, value=0):
    """Zeros are Loom's pad; another value is the tensor joined with filled pieces."""
    v = x
    rank = len(x.dims)
    for k in range(len(pad) // 2):
        d = rank - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        if before < 0 or after < 0:
            L.unsupported("constant_pad_nd with a negative pad")
        if not L.decide(before != 0 or after != 0):
            continue
        dims = list(v.dims)
        dims[d] += before + after
        if value == 0:
            v = L.emit("pad", [v], {"dim": d, "before": before, "after": after},
                       (v.dtype, tuple(dims)))
            continue
        parts = []
        for size in (before, after):
            piece = list(v.dims)
            piece[d] = size
            parts.append(L.fill(value, v.dtype, piece) if size else None)
        joined = [p for p in (parts[0], v, parts[1]) if p is not None]
        v = L.emit("concat", joined, {"dim": d}, (v.dtype, tuple(dims)))
    return v


# ---- arithmetic -------------------------------------------------------------------

def _binary(L, node, kind, a, b):
    dtype, dims = _out(node)
    return L.emit(kind, [L.tensor(a, dtype), L.tensor(b, dtype)], {}, (dtype, dims))


def _scaled(L, x, alpha, dtype):
    if alpha == 1:
        return x
    if isinstance(x, Value):
        if dtype in FLOAT:
            return L.emit("scale", [L.cast(x, dtype)], {"factor": float(alpha)}, (dtype, x.dims))
        return L.emit("mul", [L.cast(x, dtype), L.fill(alpha, dtype)], {}, (dtype, x.dims))
    return x * alpha


@rule(aten.add.Tensor, aten.add.Scalar, aten.add_.Tensor, aten.add_.Scalar)
def _add(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "add", a, _scaled(L, b, alpha, dtype))


@rule(aten.sub.Tensor, aten.sub.Scalar, aten.sub_.Tensor)
def _sub(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "sub", a, _scaled(L, b, alpha, dtype))


@rule(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(L, node, a, b, alpha=1):
    dtype, _ = _out(node)
    return _binary(L, node, "sub", b, _scaled(L, a, alpha, dtype))


@rule(aten.mul.Tensor, aten.mul.Scalar, aten.mul_.Tensor, aten.mul_.Scalar)
def _mul(L, node, a, b):
    dtype, dims = _out(node)
    if isinstance(a, Value) and not isinstance(b, Value) and dtype in FLOAT:
        return L.emit("scale", [L.cast(a, dtype)], {"factor": float(b)}, (dtype, dims))
    if isinstance(b, Value) and not isinstance(a, Value) and dtype in FLOAT:
        return L.emit("scale", [L.cast(b, dtype)], {"factor": float(a)}, (dtype, dims))
    return _binary(L, node, "mul", a, b)


@rule(aten.div.Tensor, aten.div.Scalar, aten.div_.Tensor, aten.div_.Scalar)
def _div(L, node, a, b):
    dtype, dims = _out(node)
    if isinstance(a, Value) and not isinstance(b, Value) and dtype in FLOAT:
        # A division by a number is a scale: a piece scaled differently is reported as
        # scaled by the ratio.
        return L.emit("scale", [L.cast(a, dtype)], {"factor": 1.0 / float(b)}, (dtype, dims))
    return _binary(L, node, "div", a, b)


@rule(aten.reciprocal.default)
def _reciprocal(L, node, x):
    dtype, dims = _out(node)
    return L.emit("div", [L.fill(1.0, dtype, ()), L.cast(x, dtype)], {}, (dtype, dims))


@rule(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _clamp(L, node, x, lo=None, hi=None):
    """min(max(x, lo), hi) as comparisons and selections (clip_grad_norm_'s min(1, c))."""
    if node.target is aten.clamp_max.default:
        lo, hi = None, lo
    dtype, dims = _out(node)
    v = L.cast(x, dtype)
    for bound, op in ((lo, "lt"), (hi, "gt")):
        if bound is None:
            continue
        if isinstance(bound, Value):
            L.unsupported("clamp to a tensor bound")
        past = L.emit("compare", [v, L.fill(bound, dtype)], {"op": op}, ("bool", dims))
        v = L.emit("where", [past, L.fill(bound, dtype, dims), v], {}, (dtype, dims))
    return v


@rule(aten.linalg_vector_norm.default)
def _vector_norm(L, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    """The 2-norm of a whole tensor (clip_grad_norm_'s), sqrt of its sum of squares."""
    return vector_norm_from_squares(L, node, vector_norm_squares(L, node, x, ord, dim))


def vector_norm_squares(L, node, x, ord=2, dim=None, *rest):
    """The first half of a 2-norm: the sum of squares (a rank's partial norm is one:
    norm_partial.py)."""
    if ord != 2 or (dim is not None and len(dim) != len(x.dims)):
        L.unsupported(f"vector norm of order {ord} over dims {dim} (the 2-norm of a whole "
                      "tensor is supported)")
    out_dtype, _ = _out(node)
    return L.emit("sum_squares", [L.cast(x, out_dtype)], {}, (out_dtype, ()))


def vector_norm_from_squares(L, node, squares):
    """The second half: the square root, in the norm's own shape."""
    out_dtype, dims = _out(node)
    return L.reshape(L.emit("sqrt", [squares], {}, (out_dtype, ())), dims)


def _unary(kind):
    def lower(L, node, x, *args, **kwargs):
        dtype, dims = _out(node)
        return L.emit(kind, [L.cast(x, dtype)], {}, (dtype, dims))
    return lower


for _target, _kind in [
        (aten.neg.default, "neg"), (aten.exp.default, "exp"), (aten.log.default, "log"),
        (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"), (aten.cos.default, "cos"),
        (aten.sin.default, "sin"), (aten.tanh.default, "tanh"), (aten.sigmoid.default, "sigmoid"),
        (aten.relu.default, "relu"), (aten.silu.default, "silu")]:
    RULES[_target] = _unary(_kind)


@rule(aten.pow.Tensor_Scalar)
def _pow(L, node, x, exponent):
    dtype, dims = _out(node)
    if exponent == 1:
        return L.cast(x, dtype)
    return L.emit("pow", [L.cast(x, dtype)], {"exponent": float(exponent)}, (dtype, dims))


@rule(aten.gelu.default)
def _gelu(L, node, x, approximate="none"):
    """torch's gelu: the exact one (erf) is Loom's gelu_exact, the tanh approximation
    Loom's gelu."""
    dtype, dims = _out(node)
    return L.emit(_GELU[approximate][0], [L.cast(x, dtype)], {}, (dtype, dims))


@rule(aten.gelu_backward.default)
def _gelu_backward(L, node, dy, x, approximate="none"):
    return L.emit(_GELU[approximate][1], [x, dy], {}, _out(node))


_GELU = {"none": ("gelu_exact", "gelu_exact_grad"), "tanh": ("gelu", "gelu_grad")}


@rule(aten.silu_backward.default)
def _silu_backward(L, node, dy, x):
    return L.emit("silu_grad", [x, dy], {}, _out(node))


@rule(aten.tanh_backward.default)
def _tanh_backward(L, node, dy, y):
    return L.emit("tanh_grad", [y, dy], {}, _out(node))


@rule(aten.sigmoid_backward.default)
def _sigmoid_backward(L, node, dy, y):
    return L.emit("sigmoid_grad", [y, dy], {}, _out(node))


@rule(aten.threshold_backward.default)
def _threshold_backward(L, node, dy, x, threshold):
    if threshold != 0:
        L.unsupported(f"threshold_backward with threshold {threshold}")
    return L.emit("relu_grad", [x, dy], {}, _out(node))


# ---- foreach ops (a foreach optimizer's, clip_grad_norm_'s): each element by its
# op's own rule ----------------------------------------------------------------------

def is_foreach_update(node):
    """An in-place foreach op (`_foreach_mul_`): it updates the tensors of its first
    argument and returns nothing."""
    name = getattr(getattr(node, "target", None), "__name__", "")
    return node.op == "call_function" and name.startswith("_foreach_") and \
        name.split(".")[0].endswith("_") and isinstance(node.args[0], (list, tuple))


class _Element:
    """Element i of a foreach node, as an op's rule reads a node: its name, the value
    torch computed for it (the updated tensor's, for an in-place update)."""

    def __init__(self, node, i, val):
        self.name = f"{node.name}.{i}"
        self.target = node.target
        self.meta = {"val": val}
        self.args = node.args
        self.kwargs = node.kwargs


def _foreach_rule(node):
    """The rule of the elementwise op a foreach op applies (`_foreach_addcdiv_` ->
    addcdiv's)."""
    base = node.target.__name__.split(".")[0][len("_foreach_"):].rstrip("_")
    if base == "norm":  # _foreach_norm(tensors, ord): each tensor's vector norm
        return RULES[aten.linalg_vector_norm.default]
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    for overload in packet.overloads():
        r = RULES.get(getattr(packet, overload))
        if r is not None:
            return r
    return None


def lower_foreach(L, node, args, kwargs):
    """A foreach op: its op on each element (list arguments indexed, the others as
    they are); an in-place one rebinds each element's node to its new value."""
    rule_of = _foreach_rule(node)
    if rule_of is None:
        L.unsupported(f"foreach op '{node.target}' has no elementwise Loom rule")
    count = len(args[0])
    update = is_foreach_update(node)
    vals = node.meta.get("val")
    out = []
    marks = []
    for i in range(count):
        def pick(x):
            return x[i] if isinstance(x, (list, tuple)) and len(x) == count else x
        element_args = [pick(a) for a in args]
        element_kwargs = {k: pick(v) for k, v in kwargs.items()}
        source = node.args[0][i]
        val = vals[i] if isinstance(vals, (list, tuple)) and not update else source.meta["val"]
        start = L.ops_made()
        out.append(rule_of(L, _Element(node, i, val), *element_args, **element_kwargs))
        marks.append((start, L.ops_made()))
    L.foreach_elements[node] = marks
    if update:
        for source, value in zip(node.args[0], out):
            L.rebind(source, value)
        return None
    return out


@rule(aten.lerp_.Scalar, aten.lerp.Scalar)
def _lerp(L, node, a, b, weight):
    dtype, dims = _out(node)
    diff = L.emit("sub", [b, a], {}, (dtype, dims))
    step = L.emit("scale", [diff], {"factor": float(weight)}, (dtype, dims))
    return L.emit("add", [a, step], {}, (dtype, dims))


@rule(aten.addcmul_.default, aten.addcmul.default)
def _addcmul(L, node, a, t1, t2, value=1):
    dtype, dims = _out(node)
    prod = L.emit("mul", [t1, t2], {}, (dtype, dims))
    if value != 1:
        prod = L.emit("scale", [prod], {"factor": float(value)}, (dtype, dims))
    return L.emit("add", [a, prod], {}, (dtype, dims))


@rule(aten.addcdiv_.default, aten.addcdiv.default)
def _addcdiv(L, node, a, t1, t2, value=1):
    dtype, dims = _out(node)
    q = L.emit("div", [t1, t2], {}, (dtype, dims))
    if value != 1:
        q = L.emit("scale", [q], {"factor": float(value)}, (dtype, dims))
    return L.emit("add", [a, q], {}, (dtype, dims))


@rule(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(L, node, cond, a, b):
    dtype, dims = _out(node)
    return L.emit("where", [L.cast(cond, "bool"), L.tensor(a, dtype), L.tensor(b, dtype)], {},
                  (dtype, dims))


def _compare(op):
    def lower(L, node, a, b):
        dtype, dims = _out(node)
        va = node.args[0].meta["val"] if isinstance(node.args[0], torch.fx.Node) else a
        vb = node.args[1].meta["val"] if isinstance(node.args[1], torch.fx.Node) else b
        common = DTYPES[torch.result_type(va, vb)]
        return L.emit("compare", [L.tensor(a, common), L.tensor(b, common)], {"op": op},
                      (dtype, dims))
    return lower


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _overload in ("Tensor", "Scalar"):
        RULES[getattr(getattr(aten, _op), _overload)] = _compare(_op)


def _logical(op):
    def lower(L, node, a, b):
        if a.dtype != "bool" or b.dtype != "bool":
            L.unsupported(f"bitwise {op} of {a.dtype} and {b.dtype} tensors (only of bools)")
        return L.emit("logical", [a, b], {"op": op}, _out(node))
    return lower


RULES[aten.bitwise_and.Tensor] = _logical("and")
RULES[aten.logical_and.default] = _logical("and")
RULES[aten.bitwise_or.Tensor] = _logical("or")
RULES[aten.logical_or.default] = _logical("or")


# ---- reductions and matrix products ----------------------------------------------------

def _reduce(kind):
    def lower(L, node, x, dims=None, keepdim=False, dtype=None):
        out_dtype, out_dims = _out(node)
        rank = len(x.dims)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        dims = sorted(_norm_dim(d, rank) for d in dims)
        kept = tuple(s for i, s in enumerate(x.dims) if i not in dims)
        if kind == "sum" and out_dtype in ("i64", "i32"):
            # A count (a sum of bools): Loom sums floats; f64 holds it exactly below 2^53.
            v = L.emit(kind, [L.cast(x, "f64")], {"dims": dims}, ("f64", kept))
            return L.reshape(L.cast(v, out_dtype), out_dims)
        v = L.emit(kind, [L.cast(x, out_dtype)], {"dims": dims}, (out_dtype, kept))
        return L.reshape(v, out_dims)
    return lower


RULES[aten.sum.dim_IntList] = _reduce("sum")
RULES[aten.sum.default] = _reduce("sum")
RULES[aten.mean.dim] = _reduce("mean")
RULES[aten.mean.default] = _reduce("mean")


@rule(aten.cumsum.default)
def _cumsum(L, node, x, dim, dtype=None):
    out_dtype, dims = _out(node)
    return L.emit("cumsum", [L.cast(x, out_dtype)], {"dim": _norm_dim(dim, len(x.dims))},
                  (out_dtype, dims))


@rule(aten.amax.default)
def _amax(L, node, x, dims=(), keepdim=False):
    dtype, out_dims = _out(node)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(dims) != 1:
        L.unsupported(f"amax over {len(dims) or 'all'} dims (Loom's max takes one)")
    dim = _norm_dim(dims[0], len(x.dims))
    kept = tuple(s for i, s in enumerate(x.dims) if i != dim)
    v = L.emit("max", [x], {"dim": dim}, (dtype, kept))
    return L.reshape(v, out_dims)


@rule(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(L, node, a, b):
    if isinstance(a, Merged) and isinstance(b, Merged) and a.lead == b.lead and \
            a.value.dims[:a.lead] == b.value.dims[:b.lead]:
        dtype, _ = _out(node)
        dims = tuple(a.value.dims[:-1]) + (b.value.dims[-1],)
        return Merged(L.emit("matmul", [a.value, b.value], {}, (dtype, dims)), a.lead)
    return L.emit("matmul", [L.merge(a), L.merge(b)], {}, _out(node))


@rule(aten.addmm.default)
def _addmm(L, node, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        L.unsupported(f"addmm with beta={beta}, alpha={alpha}")
    dtype, dims = _out(node)
    prod = L.emit("matmul", [a, b], {}, (dtype, dims))
    return L.emit("add", [prod, bias], {}, (dtype, dims))


def _last_dim(L, x, dim, what):
    if _norm_dim(dim, len(x.dims)) != len(x.dims) - 1:
        L.unsupported(f"{what} over dim {dim}, not the last")


@rule(aten._softmax.default)
def _softmax(L, node, x, dim, half_to_float=False):
    _last_dim(L, x, dim, "softmax")
    return L.emit("softmax", [x], {}, _out(node))


@rule(aten._softmax_backward_data.default)
def _softmax_backward(L, node, dy, y, dim, input_dtype):
    _last_dim(L, y, dim, "softmax backward")
    return L.emit("softmax_grad", [y, dy], {}, _out(node))


@rule(aten._log_softmax.default)
def _log_softmax(L, node, x, dim, half_to_float=False):
    _last_dim(L, x, dim, "log_softmax")
    return L.emit("log_softmax", [x], {}, _out(node))


@rule(aten._log_softmax_backward_data.default)
def _log_softmax_backward(L, node, dy, y, dim, input_dtype):
    _last_dim(L, y, dim, "log_softmax backward")
    return L.emit("log_softmax_grad", [y, dy], {}, _out(node))


@rule(aten.embedding.default)
def _embedding(L, node, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if isinstance(ids, MaskedIds):
        return L.emit("embedding", [ids.value, weight], {"vocab_begin": ids.begin}, _out(node))
    return L.emit("embedding", [ids, weight], {}, _out(node))


@rule(aten.embedding_dense_backward.default)
def _embedding_backward(L, node, dy, ids, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        L.unsupported("embedding backward with frequency scaling")
    value = ids.value if isinstance(ids, MaskedIds) else ids
    if padding_idx is not None and padding_idx >= 0:
        # The padding row gets no gradient: its ids are taken as -1, which no row
        # (and no vocabulary piece) holds, so Loom's embedding_grad leaves them out.
        pad = L.emit("compare", [value, L.fill(padding_idx, value.dtype)], {"op": "eq"},
                     ("bool", value.dims))
        value = L.emit("where", [pad, L.fill(-1, value.dtype, value.dims), value], {},
                       (value.dtype, value.dims))
    if isinstance(ids, MaskedIds) or value is not ids:
        # With vocab_begin, ids outside the table's rows are dropped, not an error.
        begin = ids.begin if isinstance(ids, MaskedIds) else 0
        return L.emit("embedding_grad", [value, dy],
                      {"vocab": int(num_weights), "vocab_begin": begin}, _out(node))
    return L.emit("embedding_grad", [value, dy], {"vocab": int(num_weights)}, _out(node))


@rule(aten.native_layer_norm.default)
def _layer_norm(L, node, x, normalized_shape, weight, bias, eps):
    if len(normalized_shape) != 1 or weight is None or bias is None:
        L.unsupported("layer_norm over more than the last dim, or without weight and bias")
    y = L.emit("layernorm", [x, weight, bias], {"eps": float(eps)}, _out_n(node, 0))
    return [y, ("layer_norm_stat", node, eps), ("layer_norm_stat", node, eps)]


@rule(aten.native_layer_norm_backward.default)
def _layer_norm_backward(L, node, dy, x, normalized_shape, mean, rstd, weight, bias, mask):
    if not (isinstance(mean, tuple) and mean[0] == "layer_norm_stat"):
        L.unsupported("layer_norm backward of statistics not from native_layer_norm")
    eps = mean[2]
    outs = [_out_n(node, i) for i in range(3)]
    return L.emit_n("layernorm_grad", [x, weight, dy], {"eps": float(eps)}, outs)


def _out_n(node, i):
    val = node.meta["val"][i]
    return _dtype(val), _dims(val)


@rule(aten.nll_loss_forward.default)
def _nll_loss(L, node, logp, target, weight, reduction, ignore_index):
    if weight is not None:
        L.unsupported("nll_loss with class weights")
    dtype = logp.dtype
    vocab = logp.dims[-1]
    picked = L.emit("pick", [logp, target], {"vocab_begin": 0}, (dtype, target.dims))
    valid = L.emit("compare", [target, L.fill(ignore_index, target.dtype)], {"op": "ne"},
                   ("bool", target.dims))
    count = L.emit("sum", [L.cast(valid, dtype)], {"dims": list(range(len(target.dims)))},
                   (dtype, ()))
    if reduction == 0:
        loss = L.emit("neg", [picked], {}, (dtype, target.dims))
    else:
        total = L.emit("sum", [picked], {"dims": list(range(len(target.dims)))}, (dtype, ()))
        if reduction == 1:
            total = L.emit("div", [total, count], {}, (dtype, ()))
        loss = L.emit("neg", [total], {}, (dtype, ()), hint=node.name)
    del vocab
    return [loss, count]


@rule(aten.nll_loss_backward.default)
def _nll_loss_backward(L, node, dloss, logp, target, weight, reduction, ignore_index,
                       total_weight):
    if weight is not None:
        L.unsupported("nll_loss backward with class weights")
    dtype = logp.dtype
    g = L.emit("neg", [dloss], {}, (dtype, dloss.dims))
    if reduction == 1:
        g = L.emit("div", [g, total_weight], {}, (dtype, dloss.dims))
    if g.dims != target.dims:
        g = _expand_to(L, g, target.dims)
    return L.emit("pick_grad", [target, g], {"vocab": logp.dims[-1], "vocab_begin": 0},
                  _out(node))


def _expand_to(L, v, dims):
    v = L.reshape(v, (1,) * (len(dims) - len(v.dims)) + tuple(v.dims))
    for d in range(len(dims)):
        if L.decide(v.dims[d] != dims[d]):
            new = list(v.dims)
            new[d] = dims[d]
            v = L.emit("expand", [v], {"dim": d, "size": dims[d]}, (v.dtype, tuple(new)))
    return v


# ---- scaled dot-product attention ----------------------------------------------------

_SDPA = (aten._scaled_dot_product_flash_attention_for_cpu.default,)
_SDPA_BACKWARD = (aten._scaled_dot_product_flash_attention_for_cpu_backward.default,)


def _heads_second(L, x):
    """[b, h, s, d] (torch's layout) <-> [b, s, h, d] (Loom's attention's)."""
    b, h, s, d = x.dims
    return L.emit("transpose", [x], {"perm": [0, 2, 1, 3]}, (x.dtype, (b, s, h, d)),
                  hint=f"{L.current.name}.heads")


def _mask_is_causal(L, mask_node, s, t):
    """Whether an attention mask the program computed from shapes alone (folded:
    constants.py) is the causal one: True (bool) or 0 (additive) exactly where key j
    <= query i, for every batch row and head it broadcasts over."""
    node = canonical(mask_node) if isinstance(mask_node, torch.fx.Node) else None
    value = L.folded.get(node) if node is not None else None
    if value is None or value.dim() < 2 or tuple(value.shape[-2:]) != (s, t) or s != t:
        return False
    causal = torch.ones(s, t, dtype=torch.bool).tril()
    if value.dtype == torch.bool:
        return bool((value == causal).all())
    return bool(((value == 0) == causal).all()) and bool(torch.isinf(value[..., ~causal]).all())


def _arg_node(node, position, name):
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name)


def _attention_attrs(L, mask_node, q, k, dropout_p, is_causal, attn_mask, scale):
    if dropout_p:
        L.unsupported(f"attention with dropout {dropout_p} (a random mask no proof covers)")
    if attn_mask is not None:
        # A mask computed from shapes alone is a constant: the causal one is causal
        # attention (Hugging Face passes it rather than is_causal).
        if is_causal or not _mask_is_causal(L, mask_node, q.dims[-2], k.dims[-2]):
            L.unsupported("attention with a mask other than the causal one (Loom's attention "
                          "is causal or full)")
        is_causal = True
    d = q.dims[-1]
    return {"causal": int(bool(is_causal)),
            "scale": float(scale) if scale is not None else 1.0 / math.sqrt(d)}


@rule(*_SDPA)
def _sdpa(L, node, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None,
          **kwargs):
    """torch's scaled dot-product attention on the CPU ([b, h, s, d] operands, GQA when
    q has more heads than k and v): Loom's attention on the heads-second layout; its
    log-sum-exp only feeds the backward, which recomputes it."""
    attrs = _attention_attrs(L, _arg_node(node, 5, "attn_mask"), q, k, dropout_p, is_causal,
                             attn_mask, scale)
    dtype, dims = _out_n(node, 0)
    b, h, s, dv = dims
    out = L.emit("attention", [_heads_second(L, q), _heads_second(L, k), _heads_second(L, v)],
                 attrs, (dtype, (b, s, h, dv)))
    o = L.emit("transpose", [out], {"perm": [0, 2, 1, 3]}, (dtype, dims))
    return [o, ("attention_stat", node)]


@rule(*_SDPA_BACKWARD)
def _sdpa_backward(L, node, dout, q, k, v, out, logsumexp, dropout_p=0.0, is_causal=False,
                   attn_mask=None, scale=None, **kwargs):
    if not (isinstance(logsumexp, tuple) and logsumexp[0] == "attention_stat"):
        L.unsupported("attention backward of statistics not from the attention's forward")
    attrs = _attention_attrs(L, _arg_node(node, 8, "attn_mask"), q, k, dropout_p, is_causal,
                             attn_mask, scale)
    qs, ks, vs, ds = (_heads_second(L, x) for x in (q, k, v, dout))
    grads = L.emit_n("attention_grad", [qs, ks, vs, ds], attrs,
                     [(qs.dtype, qs.dims), (ks.dtype, ks.dims), (vs.dtype, vs.dims)])
    return [L.emit("transpose", [g], {"perm": [0, 2, 1, 3]}, _out_n(node, i))
            for i, g in enumerate(grads)]


# ---- constants and positions --------------------------------------------------------

def _fill_like(L, node, value):
    dtype, dims = _out(node)
    return L.emit("fill", [], {"shape": list(dims), "value": float(value), "dtype": dtype},
                  (dtype, dims))


@rule(aten.full.default, aten.new_full.default)
def _full(L, node, *args, **kwargs):
    value = args[-1] if node.target is aten.full.default else args[2]
    return _fill_like(L, node, value)


@rule(aten.ones_like.default, aten.new_ones.default, aten.ones.default)
def _ones(L, node, *args, **kwargs):
    return _fill_like(L, node, 1.0)


@rule(aten.zeros_like.default, aten.new_zeros.default, aten.zeros.default)
def _zeros(L, node, *args, **kwargs):
    return _fill_like(L, node, 0.0)


@rule(aten.scalar_tensor.default)
def _scalar_tensor(L, node, value, **kwargs):
    return _fill_like(L, node, value)


@rule(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(L, node, *args, **kwargs):
    if node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    dtype, dims = _out(node)
    return L.emit("arange", [], {"start": start, "step": step, "size": dims[0], "dtype": dtype},
                  (dtype, dims))


@rule(aten.gather.default)
def _gather(L, node, x, dim, index, sparse_grad=False):
    """One position along the last dim per row (a cross-entropy's picked
    log-probability): Loom's pick, with the vocabulary piece of masked ids."""
    ids, begin = (index.value, index.begin) if isinstance(index, MaskedIds) else (index, 0)
    dtype, dims = _out(node)
    if _norm_dim(dim, len(x.dims)) != len(x.dims) - 1 or ids.dims[-1] != 1 or \
            ids.dims[:-1] != x.dims[:-1]:
        L.unsupported("gather of other than one position along the last dim per row")
    rows = ids.dims[:-1]
    picked = L.emit("pick", [x, L.reshape(ids, rows)], {"vocab_begin": begin}, (dtype, rows))
    return L.reshape(picked, dims)


def _is_zeros(node):
    n = canonical(node) if isinstance(node, torch.fx.Node) else None
    if n is None or n.op != "call_function":
        return False
    if n.target in (aten.zeros_like.default, aten.new_zeros.default, aten.zeros.default):
        return True
    return n.target in (aten.full.default, aten.full_like.default) and n.args[-1] == 0


@rule(aten.index_put_.default, aten.index_put.default)
def _index_put(L, node, base, indices, values, accumulate=False):
    """-1 at (row i, column ids[i]) of a zero [rows, V] tensor (cross_entropy.py's and
    loss parallel's cross-entropy backward): Loom's pick_grad of -1s."""
    rows_node = node.args[1][0] if len(node.args[1]) == 2 else None
    rows = L.folded.get(canonical(rows_node)) if isinstance(rows_node, torch.fx.Node) else None
    if isinstance(values, VocabMask):
        minus_one = values.minus_one
    else:
        v = canonical(node.args[2]) if isinstance(node.args[2], torch.fx.Node) else None
        constant = getattr(L.trace.module, v.target, None) if v is not None and \
            v.op == "get_attr" else None
        minus_one = isinstance(constant, torch.Tensor) and constant.dim() == 0 and \
            _scalar_value(constant) == -1.0
    if accumulate or len(base.dims) != 2 or not _is_zeros(node.args[0]) or rows is None or \
            not torch.equal(rows, torch.arange(base.dims[0])) or not minus_one:
        L.unsupported("an indexed update other than -1 at one column per row of zeros")
    ids = indices[1]
    ids, begin = (ids.value, ids.begin) if isinstance(ids, MaskedIds) else (ids, 0)
    update = L.fill(-1.0, base.dtype, (base.dims[0],))
    return L.emit("pick_grad", [ids, update], {"vocab": base.dims[1], "vocab_begin": begin},
                  _out(node))


# ---- Loom's routing ops (moe.py: Hugging Face's MoE blocks while traced) ----------------

from loom.torch import moe as _moe  # noqa: E402  (registers torch.ops.loom.*)

_LOOM = torch.ops.loom


@rule(_LOOM.topk_gate.default)
def _topk_gate(L, node, logits, k, normalize):
    attrs = {"k": int(k), "score": "softmax", "normalize": int(bool(normalize))}
    return L.emit_n("topk_gate", [logits], attrs, [_out_n(node, 0), _out_n(node, 1)])


@rule(_LOOM.topk_gate_grad.default)
def _topk_gate_grad(L, node, logits, indices, dweights, k, normalize):
    attrs = {"k": int(k), "score": "softmax", "normalize": int(bool(normalize))}
    return L.emit("topk_gate_grad", [logits, indices, dweights], attrs, _out(node))


def _groups_attr(groups):
    return {"groups": int(groups)}


@rule(_LOOM.moe_dispatch.default)
def _moe_dispatch(L, node, x, indices, experts, capacity, groups):
    return L.emit("moe_dispatch", [x, indices],
                  {"experts": int(experts), "capacity": int(capacity), **_groups_attr(groups)},
                  _out(node))


@rule(_LOOM.moe_dispatch_grad.default)
def _moe_dispatch_grad(L, node, dy, indices, experts, capacity, tokens, groups):
    return L.emit("moe_dispatch_grad", [dy, indices],
                  {"experts": int(experts), "capacity": int(capacity), "tokens": int(tokens),
                   **_groups_attr(groups)},
                  _out(node))


@rule(_LOOM.moe_combine.default)
def _moe_combine(L, node, expert_out, weights, indices, groups):
    return L.emit("moe_combine", [expert_out, weights, indices], _groups_attr(groups),
                  _out(node))


@rule(_LOOM.moe_combine_grad.default)
def _moe_combine_grad(L, node, expert_out, weights, indices, dy, groups):
    return L.emit_n("moe_combine_grad", [expert_out, weights, indices, dy],
                    _groups_attr(groups), [_out_n(node, 0), _out_n(node, 1)])


@rule(aten.index.Tensor)
def _index(L, node, x, indices):
    if any(i is None for i in indices):
        L.unsupported("indexing that skips a dim (None among the indices)")
    if any(i.dtype == "bool" for i in indices):
        L.unsupported("boolean mask indexing")
    return L.emit("index", [x, *indices], {}, _out(node))


@rule(torch.ops.profiler._record_function_enter_new.default,
      torch.ops.profiler._record_function_exit._RecordFunction)
def _profiler(L, node, *args, **kwargs):
    return None




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


# ---- complex tensors ---------------------------------------------------------------
# A complex tensor is held as its real view: torch.view_as_real's layout, its real and
# imaginary parts along a last dim of 2 (_dims). The conversions between the two are
# then re-labels, and complex arithmetic is written with real ops on the parts
# (complex rotary embeddings: torch.polar's table times view_as_complex of the
# queries and keys, and their backward by its conjugate).


def is_complex(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype in COMPLEX


def _parts(L, z):
    """The real and imaginary parts of complex `z` (its real view), each [..., 1]."""
    last = len(z.dims) - 1
    dims = tuple(z.dims[:-1]) + (1,)
    return [L.emit("slice", [z], {"dim": last, "begin": i, "end": i + 1}, (z.dtype, dims))
            for i in (0, 1)]


@rule(aten.view_as_complex.default, aten.view_as_real.default)
def _complex_view(L, node, x):
    return x


@rule(aten._conj.default, aten.conj_physical.default, aten.conj.default)
def _conj(L, node, z):
    re, im = _parts(L, z)
    neg = L.emit("neg", [im], {}, (im.dtype, im.dims))
    return L.emit("concat", [re, neg], {"dim": len(z.dims) - 1}, _out(node))


def complex_mul(L, node, a, b):
    """a * b with a or b complex: (ar br - ai bi) + i (ar bi + ai br); a real factor
    scales both parts."""
    dtype, dims = _out(node)
    complex_a, complex_b = (is_complex(x) for x in node.args[:2])
    if not (complex_a and complex_b):
        z, r = (a, b) if complex_a else (b, a)
        if isinstance(r, Value):
            r = L.reshape(L.cast(r, dtype), tuple(r.dims) + (1,))
            return L.emit("mul", [L.cast(z, dtype), r], {}, (dtype, dims))
        return L.emit("scale", [L.cast(z, dtype)], {"factor": float(r)}, (dtype, dims))
    (ar, ai), (br, bi) = _parts(L, L.cast(a, dtype)), _parts(L, L.cast(b, dtype))
    part = tuple(dims[:-1]) + (1,)

    def mul(x, y):
        return L.emit("mul", [x, y], {}, (dtype, part))
    re = L.emit("sub", [mul(ar, br), mul(ai, bi)], {}, (dtype, part))
    im = L.emit("add", [mul(ar, bi), mul(ai, br)], {}, (dtype, part))
    return L.emit("concat", [re, im], {"dim": len(dims) - 1}, (dtype, dims))


# What a complex tensor may go through: re-labels and views whose dims are the
# complex tensor's (non-negative: the real view has one dim more), its
# conversions, its conjugate and products.
_COMPLEX_OPS = {aten.view_as_complex.default, aten.view_as_real.default, aten._conj.default,
                aten.conj_physical.default, aten.conj.default, aten.mul.Tensor,
                aten.detach.default, aten.alias.default, aten.clone.default,
                aten.contiguous.default, aten.view.default, aten._unsafe_view.default,
                aten.reshape.default, aten.unsqueeze.default, aten.squeeze.dim,
                aten.slice.Tensor, aten.select.int, aten.expand.default}
_COMPLEX_DIM_ARG = {aten.slice.Tensor, aten.select.int}


def check_complex(L, node):
    """Refuses what Loom does not write for complex tensors (the module comment)."""
    if node.target is aten._to_copy.default and is_complex(node) and is_complex(node.args[0]):
        return  # complex64 <-> complex128: a cast of the parts
    if node.target not in _COMPLEX_OPS:
        L.unsupported(f"'{node.target}' of a complex tensor (complex tensors are supported "
                      "through view_as_complex, view_as_real, views, conj and products)")
    if node.target in _COMPLEX_DIM_ARG and is_complex(node.args[0]) and len(node.args) > 1 \
            and isinstance(node.args[1], int) and node.args[1] < 0:
        L.unsupported(f"'{node.target}' of a complex tensor along a negative dim")
