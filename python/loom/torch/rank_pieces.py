"""A rank's pieces of the step's pieces: a split of the rows the rank holds (its rows of
the batch cut into micro-batches), each of its pieces a region of one of the step's
(on a data-parallel rank, micro-batch 0 of rows 4 to 7 is the step's micro-batch 2;
cut into as many as the step cuts the whole batch, two of the rank's lie in one of the
step's). What a piece computes is a piece of what the step computes from its piece:
the again-th piece of one of the step's is matched against the step's ops anew
(RankLowering.piece_of, plan.py), with that piece's rows."""

import dataclasses

import torch

from loom.torch.spec_index import _getitem

aten = torch.ops.aten


def split_of_a_piece(R, op, x, attrs):
    """A split of a value the rank holds only some positions of along the split
    dim (its rows of the batch cut into micro-batches): each of its pieces is a
    region of one of the step's pieces, not necessarily the one of the same
    index (on a data-parallel rank, micro-batch 0 of rows 4 to 7 is the step's
    micro-batch 2), or a part of one (smaller micro-batches). Lowered as local
    slices of the rank's positions, each claiming the region of the step's piece
    it lies in (the verifier moves a slice into the split output that holds it);
    the getitems that read them take the step's pieces (R.split_pieces: the
    step's piece, how many of the rank's lie in it before this one, and its rows
    there). None where the rank holds every position."""
    d = attrs["dim"]
    whole = R.S.dims(op["inputs"][0])[d]
    begin, end = x.claim.box[d]
    if (begin, end) == (0, whole):
        return None
    theirs = list(op["attrs"]["sizes"])
    starts = [sum(theirs[:k]) for k in range(len(theirs))]
    pieces, where, at = [], [], begin
    for size in attrs["sizes"]:
        lo, hi = at, at + size
        at = hi
        inside = [k for k, s in enumerate(starts) if s <= lo and hi <= s + theirs[k]]
        pieces.append((inside[0] if inside else None, lo, hi))
        where.append(f"[{lo}:{hi}) " + (f"in the step's piece {inside[0]}" if inside
                                        else "across the step's pieces"))
    taken = [k for k, _, _ in pieces]
    if None in taken:
        R.unsupported(
            f"the rank splits positions [{begin}:{end}) of dim {d} (the model's step "
            f"splits all {whole}, into {theirs}) into {list(attrs['sizes'])}: its pieces "
            f"hold {', '.join(where)}; a loop over pieces that do not each lie in one piece "
            "of the step's is not proved yet")
    outs = []
    for k, lo, hi in pieces:
        box = list(x.claim.box)
        box[d] = (lo - starts[k], hi - starts[k])
        dims = list(x.dims)
        dims[d] = hi - lo
        claim = dataclasses.replace(x.claim, tensor=R.S.tensor_id[op["outputs"][k]],
                                    box=tuple(box))
        out = R.doc.value(R.device, claim, x.dtype, tuple(dims))
        R.doc.task(R.device, -1, "slice", {"dim": d, "begin": lo - begin, "end": hi - begin},
                   [x], [out], op["phase"], -1, R.origin)
        outs.append(out)
    R.split_pieces[R.current] = [
        (k, taken[:j].count(k), (theirs[k], lo - starts[k], hi - lo))
        for j, (k, lo, hi) in enumerate(pieces)]
    return outs


def piece_of_split(R, node):
    """A getitem of a split of the rank's positions (split_of_a_piece): the
    step's getitem of the piece it is."""
    source, j = node.args
    k, again, rows = R.split_pieces[source][j]
    R.piece_of[node] = (again, rows)
    split = R.image.get(source)
    m = next((u for u in (split.users if split is not None else ())
              if u.target is _getitem() and u.args[1] == k), None)
    if m is None:
        R.unsupported(f"the model's step never reads piece {k} of its split")
    R.S.used.add(m)
    R.image[node] = m
    R.env[node] = R.env[source][j]


_SPLITS = (aten.split.Tensor, aten.split_with_sizes.default)


def folded_per_piece(graph, folded):
    """A folded value (a causal mask expanded to the batch) that ops computing from
    different pieces of a split along dim 0 read (a rank's micro-batches): one copy
    for each piece's readers, so that each is bound to the step's value for its rows.
    Adds the copies to `folded`; returns them."""
    piece = {}
    for node in graph.nodes:
        if node.target is _getitem() and isinstance(node.args[0], torch.fx.Node) and \
                node.args[0].target in _SPLITS and _split_dim(node.args[0]) == 0:
            piece[node] = node.args[1]
            continue
        found = [piece[a] for a in node.all_input_nodes if a in piece]
        if found:
            piece[node] = max(found)
    copies = set()
    for f in list(folded):
        readers = {}
        for u in f.users:
            if u not in folded and u in piece:
                readers.setdefault(piece[u], []).append(u)
        for k in sorted(readers)[1:]:
            with graph.inserting_after(f):
                copy = graph.node_copy(f, lambda a: a)
            folded[copy] = folded[f]
            copies.add(copy)
            for u in readers[k]:
                u.replace_input_with(f, copy)
    return copies


def _split_dim(split):
    return split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
