"""Writing Loom's logical graph as its text IR (docs/formats.md, "Graph text format").

The capture builds the spec op by op through `GraphBuilder`; `text()` gives the
graph that `loom.parse_step` reads back (which checks every op's shapes again).
"""

import math
import re

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ROLES = ("activation", "gradient", "input", "loss", "parameter", "state")
PHASES = ("forward", "backward", "optimizer")


def quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def tensor_ref(name):
    return "%" + (name if _PLAIN_NAME.match(name) else quote(name))


def type_text(dtype, dims):
    return f"{dtype}[{','.join(str(int(d)) for d in dims)}]"


def attr_value(value):
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if ("." in text or "e" in text or "n" in text) else text + ".0"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(int(v)) for v in value) + "]"
    raise TypeError(f"attribute value {value!r} is not an int, float, str or list of ints")


def attrs_text(attrs):
    if not attrs:
        return ""
    parts = []
    for name in sorted(attrs):
        key = name if _IDENT.match(name) else quote(name)
        parts.append(f"{key}={attr_value(attrs[name])}")
    return " {" + ", ".join(parts) + "}"


class GraphBuilder:
    """Tensors and ops of one graph, in creation order (a topological order)."""

    def __init__(self, name):
        self.name = name
        self._items = []  # ("input", name) or ("op", index), in creation order
        self._names = set()
        self.types = {}   # tensor name -> (dtype, dims)
        self.roles = {}   # tensor name -> role
        self.ops = []     # one dict per op: kind, inputs, outputs, attrs, phase, layer, origin
        self.outputs = []

    def fresh(self, hint):
        """A tensor name not used yet, from `hint`."""
        base = hint or "t"
        name, k = base, 1
        while name in self._names:
            name = f"{base}.{k}"
            k += 1
        return name

    def input(self, name, dtype, dims, role):
        if name in self._names:
            raise ValueError(f"tensor '{name}' is declared twice")
        self._names.add(name)
        self.types[name] = (dtype, tuple(int(d) for d in dims))
        self.roles[name] = role
        self._items.append(("input", name))
        return name

    def op(self, kind, inputs, attrs, results, phase, layer=-1, origin=None):
        """Adds an op. `results`: one (name hint, dtype, dims, role or None) per output.
        Returns the output tensor names."""
        names = []
        for hint, dtype, dims, role in results:
            name = self.fresh(hint)
            self._names.add(name)
            self.types[name] = (dtype, tuple(int(d) for d in dims))
            self.roles[name] = role or "activation"
            names.append(name)
        self._items.append(("op", len(self.ops)))
        self.ops.append(dict(kind=kind, inputs=list(inputs), outputs=names, attrs=dict(attrs),
                             phase=phase, layer=layer, origin=origin))
        return names

    def rename(self, old, new):
        """Renames tensor `old` (an op's output) to `new`, a name not in use."""
        if new in self._names:
            raise ValueError(f"tensor '{new}' exists")
        self._names.discard(old)
        self._names.add(new)
        self.types[new] = self.types.pop(old)
        self.roles[new] = self.roles.pop(old)
        for op in self.ops:
            op["inputs"] = [new if n == old else n for n in op["inputs"]]
            op["outputs"] = [new if n == old else n for n in op["outputs"]]
        self.outputs = [new if n == old else n for n in self.outputs]

    def set_outputs(self, names):
        self.outputs = list(names)

    def _op_line(self, op):
        outs = ", ".join(tensor_ref(n) for n in op["outputs"])
        ins = ", ".join(tensor_ref(n) for n in op["inputs"])
        types = []
        for n in op["outputs"]:
            dtype, dims = self.types[n]
            role = self.roles[n]
            types.append(type_text(dtype, dims) + (f" {role}" if role != "activation" else ""))
        layer = op["layer"]
        tags = f" layer={layer}" if layer is not None and layer >= 0 else ""
        return (f"  {outs} = {op['kind']}({ins}){attrs_text(op['attrs'])} : "
                f"{', '.join(types)} @{op['phase']}{tags}")

    def text(self):
        lines = [f"graph {quote(self.name)} {{"]
        for what, item in self._items:
            if what == "input":
                dtype, dims = self.types[item]
                lines.append(f"  {tensor_ref(item)} = {self.roles[item]} {type_text(dtype, dims)}")
            else:
                lines.append(self._op_line(self.ops[item]))
        if self.outputs:
            lines.append("  output " + ", ".join(tensor_ref(n) for n in self.outputs))
        lines.append("}")
        return "\n".join(lines) + "\n"
