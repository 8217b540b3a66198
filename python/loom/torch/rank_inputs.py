"""A rank's inputs as pieces of the step's: parameters, buffers and optimizer states by
name, claiming what DTensor says the rank holds of them (a rank holding a piece of a
tensor of another shape than the model's trains another model: refuted); batch
tensors claiming the rows the data layout gives the rank; a pipelined rank's
micro-batch inputs claiming their rows of those, as the piece the step on one device
cuts from the batch where it cuts the same (a training step that runs its
accumulation steps and micro-batches on pieces of the batch)."""

import dataclasses
import operator

import torch

from loom.torch import claims as C
from loom.torch.errors import CaptureError, RefutedWhileLowering
from loom.torch.lowered_values import _dims
from loom.torch.pipeline import microbatch_of

aten = torch.ops.aten


# Modules that wrap a module without changing what it computes, named in the
# parameters' paths: activation checkpointing's wrapper (whose state_dict hooks drop
# the name, as torch.distributed.checkpoint does) and torch.compile's.
_WRAPPER_NAMES = ("_checkpoint_wrapped_module", "_orig_mod")


def unwrapped_name(name):
    """A parameter's name as its state_dict gives it: `layers.1._checkpoint_wrapped_module
    .attention.wq.weight` is `layers.1.attention.wq.weight`."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_NAMES)


def placeholder(R, node, ph):
    """The rank's input `node` (its capture.Placeholder `ph`) as the piece of the
    step's input of the same name it holds (the module docstring)."""
    split = microbatch_of(ph.name) if ph.kind == "input" else None
    if split is not None and split[0] in R.S.placeholder:
        return _microbatch_input(R, node, ph, *split)
    spec_node = R.S.placeholder.get(ph.name)
    if spec_node is None:
        spec_node = R.S.placeholder.get(unwrapped_name(ph.name))
    aliases = R.S.spec.trace.param_aliases or {}
    if spec_node is None and ph.fqn in aliases:
        # A parameter the model's step shares between two modules (tied
        # embeddings) that the rank holds twice: both copies are pieces of it.
        spec_node = R.S.placeholder.get(aliases[ph.fqn] + ph.name[len(ph.fqn):])
        R.second_copy.add(node)
    if spec_node is None:
        raise CaptureError(f"rank {R.device}: input '{ph.name}' is not an input of the "
                           "model's step")
    sval = R.S.L.input_value[spec_node]
    tensor = R.S.tensor_id[sval.name]
    val = node.meta["val"]
    dims = _dims(val)
    if ph.kind != "input":
        whole = dims
        if ph.dtensor is not None:
            whole = tuple(ph.dtensor.shape) + tuple(dims[len(val.shape):])
        if whole != tuple(sval.dims):
            _another_model(R, ph, whole, sval)
    if ph.dtensor is not None:
        claim = C.from_dtensor_spec(ph.dtensor, tensor, R.device)
    elif ph.kind == "input":
        claim = R.data_claim(ph, tensor, sval.dims, dims, R.rank)
        if sval.dims and R.batch_rows is None:
            begin, end = claim.box[0]
            R.batch_rows = (sval.dims[0], begin, end - begin)
    else:
        claim = C.full_claim(tensor, sval.dims)
    R.env[node] = R.doc.value(R.device, claim, sval.dtype, dims)
    R.image[node] = spec_node


def _another_model(R, ph, whole, sval):
    """A parameter (buffer, optimizer state) the rank holds as a piece of a tensor
    of another shape than the model's (a vocabulary padded to a multiple of the
    tensor-parallel degree, a resized embedding): the ranks train another model.
    Refuted here; nothing the rank computes from it is a piece of the step's."""
    R.doc.failures.append(dict(
        cls="computation_differs", tensor=sval.name, devices=[R.device],
        message=(f"rank {R.device} holds '{ph.name}' as a piece of a {list(whole)} "
                 f"tensor where the model's is {list(sval.dims)}: the ranks train "
                 "another model (a resized or padded parameter)"),
        origin={"module": ph.fqn.rpartition(".")[0], "phase": "parameter"}))
    raise RefutedWhileLowering(R.doc)


def _microbatch_input(R, node, ph, base, m):
    """Micro-batch m of a pipelined rank's batch input: its rows of the rank's rows
    of the step's input (the rank's rows split into the schedule's micro-batches,
    as torch.tensor_split does)."""
    spec_node = R.S.placeholder[base]
    sval = R.S.L.input_value[spec_node]
    tensor = R.S.tensor_id[sval.name]
    dims = tuple(int(d) for d in node.meta["val"].shape)
    claim = R.data_claim(ph, tensor, sval.dims, dims, R.rank)
    if sval.dims:
        begin, end = claim.box[0]
        count = R.rank.pipeline.total_microbatches
        lo, hi = C.chunk(end - begin, count, m)
        claim = dataclasses.replace(claim, box=((begin + lo, begin + hi),) + claim.box[1:])
        R.batch_rows_of.setdefault(m, (sval.dims[0], begin + lo, hi - lo))
    value = R.doc.value(R.device, claim, sval.dtype, dims)
    R.env[node], R.image[node] = _spec_piece_of_rows(R, spec_node, value)


def _spec_piece_of_rows(R, spec_node, value):
    """The smallest piece of the step's input `spec_node` that the step cuts off by
    its rows (a split or chunk along dim 0, again and again: a training step that
    runs its accumulation steps and micro-batches on pieces of the batch) and that
    holds the rows `value` holds, as (that region of the piece, its node): a
    local slice of all of `value` per cut, claiming its rows of the piece (the
    verifier moves it into the split's output that holds it). `value` and the
    input itself where the step cuts none."""
    while value.dims:
        begin, end = value.claim.box[0]
        found = next(((piece, lo) for u in spec_node.users
                      for piece, lo, hi in _row_pieces(u)
                      if lo <= begin and end <= hi and piece in R.S.L.env), None)
        if found is None:
            break
        spec_node, lo = found
        claim = dataclasses.replace(
            value.claim, tensor=R.S.tensor_id[R.S.L.env[spec_node].name],
            box=((begin - lo, end - lo),) + value.claim.box[1:])
        piece = R.doc.value(R.device, claim, value.dtype, value.dims)
        R.doc.task(R.device, -1, "slice", {"dim": 0, "begin": 0,
                                                 "end": value.dims[0]},
                      [value], [piece], "forward", -1, R.origin)
        value = piece
    return value, spec_node


def _row_pieces(node):
    """(piece node, first row, end row) of each piece `node` cuts off the rows of its
    input, all of its other dims whole: the outputs of a split along dim 0 (chunk's
    too; the verifier knows a local slice as a piece of a split's output)."""
    if node.op != "call_function" or not node.args:
        return []
    source = node.args[0]
    val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if val is None or not val.dim():
        return []
    rows = int(val.shape[0])
    if node.target in (aten.split.Tensor, aten.split_with_sizes.default):
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        if dim % val.dim() != 0:
            return []
        split = node.args[1]
        sizes = [split] * (rows // split) + ([rows % split] if rows % split else []) \
            if isinstance(split, int) else list(split)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        out = []
        for u in node.users:
            if u.target is operator.getitem and isinstance(u.args[1], int):
                i = u.args[1]
                out.append((u, starts[i], starts[i] + sizes[i]))
        return out
    return []
