"""What a lowering makes and reads besides Loom values' names: the values of the graph
being built (a tensor, a vocabulary piece's ids and mask, a merged view kept apart, a
tensor with no elements), torch's dtypes as Loom's, and the error for an op with no
Loom meaning."""

import dataclasses

import torch

from loom.torch.errors import CaptureError

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


def _is_fake(t):
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _scalar_value(t):
    if _is_fake(t):
        c = getattr(t, "constant", None)
        return None if c is None else c.item()
    return t.item()
