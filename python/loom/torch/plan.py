"""The plan: the per-rank programs torch.distributed runs, as a Loom plan over the
captured spec.

Each rank's traced program (distributed.RankTrace) is walked in order:

- its inputs are the spec's inputs (parameters by name, optimizer states, batch
  tensors), each claiming what DTensor (or, for the batch, the data layout) says
  the rank holds of it;
- an op of the model's code is matched to the op of the spec it is a piece of, by
  data flow: the op of the same ATen kind whose operands are the spec images of
  its own operands (the source line, then the order, tell apart ops that read the
  same operands); it is lowered with the same rules as the spec, and each Loom op
  it gives is a task computing a piece of the spec's Loom op in the same place;
- a redistribution DTensor ran (a Partial made Replicate, a Shard gathered, ...)
  becomes the collectives and local copies its placement change means, mesh dim by
  mesh dim, in torch's own order (torch's _gen_transform_infos); the members of a
  collective are the ranks that share every mesh coordinate but its dim's;
- every value claims what DTensor says its local tensor holds where DTensor says
  anything (the trace's Recorder), and what its op's partition signature implies
  otherwise; the verifier checks every claim against what the plan computes.

An op with no counterpart in the spec stops the plan (CaptureError naming the op,
the module and the source line): the rank does not run the model's computation.

The matching is spec_index.py's, the plan being written plan_document.py's, the
collectives and redistributions rank_collectives.py's, the rank's inputs
rank_inputs.py's, its own scalings rank_scalings.py's; this file walks a rank's
program and lowers all ranks together.
"""

import collections
import dataclasses
import math
from fractions import Fraction

import torch

from loom.torch import accumulation
from loom.torch import claims as C
from loom.torch import gradient_sums
from loom.torch import norm_partial
from loom.torch import pipeline_plan
from loom.torch import rank_accumulation
from loom.torch import rank_inputs
from loom.torch import rank_pieces
from loom.torch import rank_scalings
from loom.torch import stage_norms
from loom.torch import plan_symmetry
from loom.torch.errors import CaptureError
from loom.torch.identities import C10D_ALL_REDUCE, canonical, is_identity
from loom.torch.lower import Lowering
from loom.torch.lowered_values import VocabMask
from loom.torch.pipeline import microbatch_of_action
from loom.torch.plan_document import PValue, PlanDocument, implied_claims
from loom.torch.rank_collectives import (RankCollectives, _C10dResult, assemble_collectives,
                                         repair_sum_parts)
from loom.torch.spec_index import (ANY, _FUNCTIONAL_COLLECTIVES, FoldedVar, SpecIndex, _getitem,
                                   _ndim)

aten = torch.ops.aten

_FILLS_LIKE = (aten.ones_like.default, aten.zeros_like.default)


def _mean_count(S, op, x, attrs):
    """A rank's mean over fewer elements than the step's op `op` averages (its piece
    of a dim DTensor splits: a Partial(avg) value): the attributes with the count it
    divides by, and the piece's multiple of its share of the step's mean (the
    step's count over the rank's). The attributes as they are, and 1, otherwise."""
    spec_dims = S.dims(op["inputs"][0])
    dims = attrs.get("dims", list(range(len(x.dims))))
    mine = math.prod(x.dims[d] for d in dims)
    theirs = op["attrs"].get("count", math.prod(spec_dims[d] for d in dims))
    if mine == theirs or not mine:
        return attrs, 1
    return {**attrs, "count": mine}, Fraction(theirs, mine)


# ---------------------------------------------------------------------------------
# One rank's program.



class RankLowering(RankCollectives, Lowering):
    """Lowers a rank's matched ops with the spec's rules; each Loom op becomes a task
    paired with the spec op the same rule gave for the matched spec node."""

    def __init__(self, S, rank, doc, data_claim):
        self.S = S
        self.rank = rank
        self.doc = doc
        self.device = rank.rank
        self.trace = rank.trace
        self.data = rank.data  # a stand-in's own batch (constants.concrete_data)
        self.data_claim = data_claim
        self.origins = __import__("loom.torch.lower", fromlist=["Origins"]).Origins(
            rank.trace.module.graph, rank.trace.optimizer.get("site"))
        self.env = {}
        self.image = {}       # rank FX node -> spec FX node it is a piece of (or its source)
        self.current = None
        self.origin = None
        self.node_param = {}
        self.template = []
        self.cursor = 0
        self.spec_node = None
        self.dcursor = 0
        self.collective_log = []  # (key, mesh_dim, kind, attrs, in value, out value)
        self.constants = {}
        self.inputs = {}
        self.data_dims = ()   # mesh dims that split the batch (set by build_plan)
        self.mesh_sizes = ()  # the launch mesh (set by build_plan)
        self.batch_rows = None  # (batch size, first row, rows) of the rank's batch
        self.batch_rows_of = {}  # micro-batch -> the same, of a pipelined rank's micro-batch
        self.microbatch = None  # the micro-batch of the node being lowered
        self._counts = 0
        self._masked_sums = 0
        # Collectives the rank's code calls itself, counted per process group: the
        # k-th on a group meets the k-th of every other member (ranks of different
        # pipeline stages call different ones on other groups before).
        self._functionals = collections.Counter()
        self.second_copy = set()  # rank nodes computed from a second copy of a shared parameter
        self.received = {}    # placeholder node -> name of what the rank receives there
        self.unbound = {}     # folded FX node -> FoldedVar, until an op reading it is matched
        self.unbound_origin = {}
        self.published = {}   # (device, name) -> (PValue, spec image) of what ranks send
        self._op_by_op = False  # lowering a sum gradient_sums.py held back, as it is
        self.split_pieces = {}  # rank split node -> per piece: (step piece, again, rows); rank_pieces.py
        # Rank node -> (again, rows): computed from a piece of a split that lies inside
        # one of the step's pieces, the again-th such piece of it (0: the first), and the
        # piece's rows of the step's piece, (its size, first row, rows).
        self.piece_of = {}
        self.piece = None  # the same, of the node being lowered
        self.sub_foreach = {}  # rank foreach node -> (step's node, its elements'): stage_norms
        self.foreach_elements = {}  # as Lowering's, in the step's ops of the matched node
        self.stage_partials = set()  # norm nodes of a stage's rows (stage_norms.py)
        self.completed_terms = set()  # rank gradients lowered as their share of a step's sum

    def partial_norm_element(self, node, i, args=None):
        """Element i of the rank's `_foreach_norm` when it is the norm of a shard
        (norm_partial.py): with `args`, its PartialNorm; without, whether it is one."""
        if args is None:
            return norm_partial.is_partial_element(self, node, i)
        return norm_partial.lower_norm_element(self, node, i, args)

    # ---- tasks -----------------------------------------------------------------------
    def emit_n(self, kind, inputs, attrs, outs, hint=None):
        if self.cursor >= len(self.template):
            self.unsupported(f"the rank lowers '{self.current.target}' to more ops than the "
                             "model's step does")
        index = self.template[self.cursor]
        op = self.S.g.ops[index]
        if op["kind"] != kind:
            self.unsupported(f"the rank lowers '{self.current.target}' to '{kind}' where the "
                             f"model's step has '{op['kind']}'")
        self.cursor += 1
        if kind == "split":
            pieces = rank_pieces.split_of_a_piece(self, op, inputs[0], attrs)
            if pieces is not None:
                return pieces
        if len(outs) != len(op["outputs"]):
            self.unsupported(f"the rank's '{kind}' gives {len(outs)} values where the model's "
                             f"step's gives {len(op['outputs'])} (a loop over another number "
                             "of pieces, such as micro-batches of a fixed size)")
        tensors = [self.S.tensor_id[n] for n in op["outputs"]]
        if kind in ("fill", "expand"):
            whole = self._whole_broadcast(index, op, inputs, attrs, tensors, outs)
            if whole is not None:
                return whole
        if kind == "mean":
            attrs, ratio = _mean_count(self.S, op, inputs[0], attrs)
        implied = implied_claims(self.S, index, inputs, tensors, [d for _, d in outs],
                                 self.free_box)
        if kind == "mean" and ratio != 1:
            implied = [dataclasses.replace(c, scale=c.scale * ratio) for c in implied]
        if kind == "scale" and attrs.get("factor") != op["attrs"].get("factor"):
            # The step's scale by another factor (a loss divided by the world size,
            # which is 1 on one device): the piece times their ratio.
            ratio = C.rational_of(attrs["factor"]) / C.rational_of(op["attrs"]["factor"])
            implied = [dataclasses.replace(c, scale=c.scale * ratio) for c in implied]
            scaled_by = (ratio, attrs["factor"], op["attrs"]["factor"])
        if kind == "pick_grad" and "vocab_begin" in attrs:
            # A vocabulary piece's gradient: its range is the piece's, which no input
            # of the op carries.
            begin = attrs["vocab_begin"]
            box = implied[0].box[:-1] + ((begin, begin + attrs["vocab"]),)
            implied[0] = dataclasses.replace(implied[0], box=box)
        for c, (_, dims) in zip(implied, outs):
            if tuple(e - b for b, e in c.box) != tuple(dims):
                self.unsupported(
                    f"the rank's {list(dims)} piece of '{kind}' is no box of the model's "
                    f"{list(self.S.dims(op['outputs'][0]))} tensor (a view merging a split "
                    "dim into a whole one)")
        outputs = [self.doc.value(self.device, c, dt, dims)
                   for c, (dt, dims) in zip(implied, outs)]
        if kind == "scale" and attrs.get("factor") != op["attrs"].get("factor"):
            ratio, got, want = scaled_by
            self.doc.scalings.append(dict(
                value=outputs[0].id, device=self.device, factor=ratio,
                what=f"a scaling by {got:g} where the model's step scales by {want:g}",
                origin=self.origin))
        self.doc.task(self.device, index, kind, attrs, inputs, outputs, op["phase"],
                      op["layer"], self.origin)
        return outputs

    # ---- the walk ----------------------------------------------------------------------
    def run(self):
        """Lowers the rank's program alone (a rank that receives nothing)."""
        steps = self.steps()
        try:
            while True:
                wanted = next(steps)
                raise CaptureError(f"rank {self.device} receives '{wanted}' from no rank")
        except StopIteration as done:
            return done.value

    def steps(self):
        """Lowers the rank's program, a generator: it yields the name of a value the
        rank receives (a pipeline stage's input or output gradient) when it needs it,
        and is sent back (PValue, spec image) once its sender has lowered it
        (build_plan). It returns the plan values of the trace's outputs."""
        graph = self.trace.module.graph
        output_node = graph.output_node()
        live = self._live(graph, output_node)
        self.folded, live = self.fold_constants(graph, live)
        live |= rank_pieces.folded_per_piece(graph, self.folded)
        rec = self.rank.recorder
        redistributions = {r.output_node: r for r in rec.redistributions if r.nodes}
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, ph in zip(placeholders, self.trace.placeholders):
            if ph.kind == "recv":
                self.received[node] = ph.name
                continue
            rank_inputs.placeholder(self, node, ph)
        sends = {n: name for n, (kind, name) in zip(output_node.args[0], self.trace.outputs)
                 if kind == "send"}
        self._name_outputs(output_node)  # the parameter each update belongs to
        self.chains = accumulation.Chains(graph)
        for node in graph.nodes:
            if node.op in ("placeholder", "output") or node not in live:
                continue
            for a in node.all_input_nodes:
                if a in self.received and a not in self.env:
                    value, image = yield self.received[a]
                    self._receive(a, value, image)
            self._lower_node(node, rec, redistributions)
            if node in sends:
                self.published[(self.device, sends[node])] = (self.env[node], self.image.get(node))
        outs = []
        for n, (kind, name) in zip(output_node.args[0], self.trace.outputs):
            outs.append(self.env.get(n) if isinstance(n, torch.fx.Node) else None)
        return outs

    def _lower_node(self, node, rec, redistributions):
        self.current = node
        self.origin = self.origins.of(node, self.node_param.get(node))
        # Each micro-batch's ops are pieces of the step's ops: matched anew.
        action = self.origin.get("action")
        self.microbatch = microbatch_of_action(action)
        # A weight backward recomputes what the input backward computed before it; a
        # checkpointed module's recompute what its forward computed.
        recompute = (node.meta.get("custom") or {}).get("recompute")
        # A second piece of one of the step's pieces (a rank's smaller micro-batch)
        # is a piece of the same ops of the step's as the first.
        pieces = [self.piece_of[a] for a in node.all_input_nodes if a in self.piece_of]
        self.piece = max(pieces, key=lambda p: p[0]) if pieces else None
        if self.piece is not None:
            self.piece_of[node] = self.piece
            for a in node.all_input_nodes:
                if a in self.unbound:  # a shape-only value, of the piece's rows
                    self.unbound[a].preferred = {0: self.piece[1][1]}
        self.S.used = self.used.setdefault((self.microbatch, (action or "")[:1] == "W",
                                            recompute, self.piece[0] if self.piece else 0),
                                           set())
        if node in self.chains.inner:
            return  # lowered with the chain's last link
        if node in self.chains.terms:
            terms = self.chains.terms[node]
            self.env[node] = rank_accumulation.lower_rank_chain(self, node, terms, canonical)
            return
        custom = node.meta.get("custom") or {}
        after_backward = custom.get("own_site") or custom.get("phase") == "optimizer"
        for a in node.all_input_nodes if after_backward and not is_identity(node) else ():
            if a not in self.completed_terms and isinstance(self.env.get(a), PValue) and \
                    rank_accumulation.completes_a_term(self, a, canonical):
                # The rank's only term of a gradient the step accumulates: its share.
                self.completed_terms.add(a)
                self.env[a] = rank_accumulation.lower_rank_chain(self, a, [a], canonical)
        if (node.meta.get("custom") or {}).get("accumulate") and \
                node.target in (aten.add.Tensor, aten.add_.Tensor):
            self.env[node] = rank_accumulation.add_microbatch_gradients(self, node, canonical)
            return
        if self.second_copy and any(a in self.second_copy for a in node.all_input_nodes):
            self.second_copy.add(node)
        if node in self.folded:
            self._folded_value(node)
            return
        if not self._goes_to_model_op(node, rec):
            self._bind_operands(node)
        if node.name in rec.glue:
            r = redistributions.get(node.name)
            if r is not None:
                self._redistribute(node, r)
            elif node.name in rec.mask_windows:
                self._mask_window(node, rec.mask_windows[node.name])
            elif node.name in rec.aliases:
                self._alias(node, rec.aliases[node.name])
            return
        if node.op == "call_function" and node.target in _FUNCTIONAL_COLLECTIVES:
            self._functional_collective(node)
            return
        if node.op == "get_attr" and isinstance(getattr(self.trace.module, node.target, None),
                                                torch.ScriptObject):
            self.env[node] = getattr(self.trace.module, node.target)  # a c10d op's group
            return
        if node.op == "call_function" and node.target is C10D_ALL_REDUCE:
            self._c10d_all_reduce(node)
            return
        if node.op == "call_function" and node.target is _getitem() and \
                isinstance(self.env.get(node.args[0]), _C10dResult):
            self.env[node] = self.env[node.args[0]][node.args[1]]
            self.image[node] = self.image.get(node.args[0])
            return
        if any(isinstance(self.env.get(a), VocabMask) for a in node.all_input_nodes) and \
                node.target not in (aten.index_put_.default, aten.index_put.default):
            self._vocab_mask_op(node)
            return
        self._model_op(node)

    def _goes_to_model_op(self, node, rec):
        return node.name not in rec.glue and not (
            node.op == "call_function" and node.target in _FUNCTIONAL_COLLECTIVES) and \
            not any(isinstance(self.env.get(a), VocabMask) for a in node.all_input_nodes)

    def _receive(self, node, sent, image):
        """What the rank receives (a placeholder of its trace): a copy of the value its
        sender sent, claiming the same piece, joined to it by a send_recv."""
        value = self.doc.value(self.device, sent.claim, sent.dtype, sent.dims)
        self.env[node] = value
        self.image[node] = image
        self.doc.p2p.append(dict(name=self.received[node], source=sent, destination=value))

    def _folded_value(self, node):
        """A rank's folded shape-only value: bound to the spec's when an op reads it
        (SpecIndex._match_open), a plan input claiming the region of the spec's value
        it equals (constants.py)."""
        rows_of = self.rows()
        preferred = {0: rows_of[1]} if rows_of else None
        self.unbound[node] = FoldedVar(node, self.folded[node], preferred, nodes=[node])
        self.unbound_origin[node] = self.origin

    def _bind_folded(self, node, m):
        """The rank's folded value `node` (and what re-labels it) as the region of the
        spec's folded `m` it equals; none is a failure here."""
        var = self.unbound[node]
        first = var.nodes[0]
        origin, self.origin = self.origin, self.unbound_origin.get(first, self.origin)
        try:
            self._folded_as(first, m, var.piece, var.preferred)
        finally:
            self.origin = origin
        for n in var.nodes:
            self.unbound.pop(n, None)
            self.env[n] = self.env[first]
            self.image[n] = m

    def _folded_as(self, node, m, piece, preferred):
        from loom.torch import constants
        sval = self.S.L.env[m]
        tensor = self.S.tensor_id[sval.name]
        whole = self.S.L.folded[m]
        found = constants.scaled_region(whole, piece, preferred)
        scale = Fraction(1)
        if found is None:
            self.doc.failures.append(dict(
                cls="wrong_shard", tensor=sval.name, devices=[self.device],
                message=(f"rank {self.device} computes {list(piece.shape)} values from "
                         f"shapes that are no region of the model's {list(whole.shape)}"),
                origin=self.origin))
            box = tuple((0, d) for d in piece.shape)
        else:
            box, scale = found
        claim = C.Claim(tensor=tensor, box=box, part=C.FULL, scale=scale)
        self.env[node] = self.doc.value(self.device, claim, sval.dtype, tuple(piece.shape))
        if scale != 1:
            mine, theirs = piece.reshape(()).item(), whole.reshape(()).item()
            self.doc.scalings.append(dict(
                value=self.env[node].id, device=self.device, factor=scale,
                what=f"a value of the rank's batch ({mine:g}, a token count) where the "
                     f"model's step has the whole batch's ({theirs:g})",
                origin=self.origin))
        self.image[node] = m

    def _spec_image(self, a):
        if isinstance(self.env.get(a), VocabMask):
            return ANY  # the update loss parallel writes, where the spec writes a -1
        if a in self.unbound:
            return self.unbound[a]
        return self.image.get(a)

    def _bind_operands(self, node):
        """Binds the folded values `node` reads (FoldedVars its match bound)."""
        for a in node.all_input_nodes:
            var = self.unbound.get(a)
            if var is not None and var.bound is not None:
                self._bind_folded(a, var.bound)
            elif var is not None:
                # Matched otherwise (no spec op reads it alike): the first spec value
                # made by the same op, at the same line first.
                piece, preferred = var.piece, var.preferred
                m = self.S.match_folded(a) or self.S.match_folded_by_value(a, piece, preferred)
                if m is None:
                    self.origin = self.unbound_origin.get(a, self.origin)
                    self.unsupported(f"the rank computes a value from shapes ('{a.target}') "
                                     "the model's step does not")
                self._bind_folded(a, m)

    def _whole_broadcast(self, index, op, inputs, attrs, tensors, outs):
        """A fill or an expand a rank computes in part along the dim it makes (a batch
        of rows it has only some of): Loom's pieces compute such a dim whole, so the
        task computes all of it and a slice keeps the rank's rows. Every position
        along that dim holds the same values, so this is what the rank computes.
        None when the rank computes the whole dim."""
        dtype, dims = outs[0]
        full = self.S.dims(op["outputs"][0])
        if tuple(dims) == tuple(full):
            return None
        if op["kind"] == "fill":
            made = [d for d in range(len(full))]
        else:
            made = [op["attrs"]["dim"]]
        partial = [d for d in range(len(full)) if dims[d] != full[d]]
        if any(d not in made for d in partial):
            return None
        whole_attrs = dict(attrs)
        if op["kind"] == "fill":
            whole_attrs["shape"] = list(full)
            whole_dims = tuple(full)
        else:
            whole_attrs["size"] = op["attrs"]["size"]
            whole_dims = tuple(full[d] if d in made else dims[d] for d in range(len(full)))
        claims = implied_claims(self.S, index, inputs, tensors, [whole_dims], None)
        v = self.doc.value(self.device, claims[0], dtype, whole_dims)
        self.doc.task(self.device, index, op["kind"], whole_attrs, inputs, [v], op["phase"],
                      op["layer"], self.origin)
        for d in partial:
            lo, hi = self.free_box(full[d], dims[d])
            box = list(v.claim.box)
            box[d] = (box[d][0] + lo, box[d][0] + hi)
            piece_dims = list(v.dims)
            piece_dims[d] = hi - lo
            out = self.doc.value(self.device, dataclasses.replace(v.claim, box=tuple(box)),
                                 dtype, tuple(piece_dims))
            self.doc.task(self.device, -1, "slice", {"dim": d, "begin": lo, "end": hi}, [v],
                          [out], op["phase"], -1, self.origin)
            v = out
        return [v]

    def ops_made(self):
        """Where the lowering is in the step's ops of the matched node."""
        return self.cursor

    def rows(self):
        """(the step's rows, the first the node being lowered computes from, how many):
        of its micro-batch, of the piece of one of the step's it computes from, else of
        the rank's batch; None where the rank has no batch rows."""
        if self.microbatch in self.batch_rows_of:
            return self.batch_rows_of[self.microbatch]
        if self.piece is not None:
            return self.piece[1]
        return self.batch_rows

    def free_box(self, extent, size):
        """Where a rank's `size` positions of a dim of `extent` lie when nothing but
        the rank's own shape says: broadcast over the batch (an expand to the batch
        size), they are the rank's rows of the batch; otherwise the first ones."""
        rows_of = self.rows()
        if rows_of is not None:
            total, begin, rows = rows_of
            # The same fraction of the dim as of the batch (the batch, or the batch
            # flattened with other dims): the rank's rows' positions there.
            if extent * rows == size * total and (extent * begin) % total == 0:
                first = extent * begin // total
                return (first, first + size)
        return (0, size)

    def decide(self, condition):
        """The choice the spec's lowering of the matched op made (Lowering.decide)."""
        made = self.S.L.decisions.get(self.spec_node, [])
        if self.dcursor >= len(made):
            self.unsupported(f"the rank's '{self.current.target}' lowers differently from the "
                             "model's step")
        choice = made[self.dcursor]
        self.dcursor += 1
        return choice

    def _alias(self, node, source_name):
        """`node` re-labels the value of `source_name` (DTensor's from_local/to_local):
        the same plan value, claiming what DTensor now says it holds."""
        src = self._find(source_name)
        while src not in self.env and src.name in self.rank.recorder.aliases:
            src = self._find(self.rank.recorder.aliases[src.name])
        self.env[node] = self.env[src]
        self.image[node] = self.image.get(src)
        spec = self.rank.recorder.specs.get(node.name)
        if spec is not None and isinstance(self.env[node], PValue):
            self.env[node] = self._claimed(self.env[node], spec)

    def _model_op(self, node):
        if is_identity(node) and node.args[0] in self.unbound:
            # A re-labelled folded value: the same value, bound with it.
            var = self.unbound[node.args[0]]
            var.nodes.append(node)
            self.unbound[node] = var
            return
        if is_identity(node):  # the spec's identities are no candidates either
            self._alias(node, node.args[0].name)
            return
        if node.target is _getitem() and node.args[0] in self.split_pieces:
            rank_pieces.piece_of_split(self, node)
            return
        if node.target is _getitem() and node.args[0] in self.sub_foreach:
            stage_norms.element_of(self, node)
            return
        if stage_norms.power(self, node):
            return
        stage_norms.read_unreduced(self, node)
        if not self._op_by_op and gradient_sums.is_gradient_add(node) and \
                gradient_sums.lower(self, node, canonical):
            return
        # What a second copy of a shared parameter computes is the spec's computation
        # of it a second time.
        again = node in self.second_copy
        m = self._same_constant(node) if node.op == "get_attr" else None
        if m is None:
            m = self.S.match(node, self._spec_image, again)
        if m is None and (stage_norms.sub_foreach(self, node) or
                          stage_norms.stack_rows(self, node)):
            return  # some of the elements of one of the step's (a pipeline stage's)
        if m is None:
            # The spec's op on the same operands but one: the rank computes it on
            # another value (a gradient lacking a contribution, a stage sending the
            # wrong tensor); lowered as it is, the verifier says where it differs.
            m = self.S.match_but_one(node, self._spec_image)
            if m is not None and _ndim(m) != _ndim(node):
                m = None  # no piece of it: an op of another rank (the same line)
            if m is not None:
                rank_scalings.explain_scale(self, node, m)
        if m is None and node.target in _FILLS_LIKE:
            # A tensor of ones (zeros) shaped like another: autograd's seed of a
            # backward, which the step may start from another value (a loss the
            # rank's schedule backwards before the division the step makes).
            m = self.S.fill_alike(node)
        if m is None and rank_scalings.extra_scale(self, node):
            return
        if m is None:
            self.unsupported(f"the rank runs '{node.target}' where the model's step has no "
                             "such op on the same operands")
        self._bind_operands(node)
        self.image[node] = m
        self.spec_node = m
        self.template = self.S.L.node_ops.get(m, [])
        self.cursor = 0
        self.dcursor = 0
        partial = norm_partial.is_partial_norm(self.rank.recorder.specs.get(node.name))
        rows = node.target is aten.linalg_vector_norm.default and not partial and \
            stage_norms.holds_rows(self, node.args[0])
        if node.target is aten.linalg_vector_norm.default and (partial or rows):
            # The norm of the rank's shard, which DTensor (or the program's all-reduce
            # over the pipeline group: stage_norms.py) completes later.
            self.env[node] = norm_partial.lower_norm(self, node, m)
            if rows:
                self.stage_partials.add(node)
            return
        if partial:
            if node.target is aten.stack.default:
                self.env[node] = norm_partial.stack(self, node, m,
                                                    [self.env[a] for a in node.args[0]])
                return
        if any(isinstance(self.env.get(a), (norm_partial.PartialNorm,
                                             norm_partial.StackedNorms,
                                             norm_partial.WholeNorm,
                                             stage_norms.StackedRows))
               for a in node.all_input_nodes):
            self.unsupported(f"'{node.target}' reads the norm of a shard before the ranks' "
                             "norms are combined")
        if node.op == "get_attr":
            result = self._constant(node)
        else:
            result = self._lower(node)
        if self.cursor != len(self.template):
            self.unsupported(f"the rank lowers '{node.target}' to fewer ops than the model's "
                             "step does")
        # What DTensor says the local tensor holds is the value's claim.
        spec = self.rank.recorder.specs.get(node.name)
        if spec is not None and isinstance(result, PValue):
            result = self._claimed(result, spec)
        self.env[node] = result

    def _same_constant(self, node):
        """The step's scalar constant of the same dtype and value as the rank's
        `node` (the step holds one node per value: dedupe.py), or None."""
        from loom.torch.dedupe import _scalar_constant
        mine = _scalar_constant(self.trace.module, node)
        if mine is None:
            return None
        module = self.S.spec.trace.module
        for m in self.S.candidates.get(("get_attr", ()), ()):
            if _scalar_constant(module, m) == mine:
                self.S.used.add(m)
                return m
        return None

    def lower_op(self, node):
        """Lowers `node` (a model op) as it is, op by op (gradient_sums.py)."""
        saved = self.current, self.origin
        self.current = node
        self.origin = self.origins.of(node, self.node_param.get(node))
        self._op_by_op = True
        try:
            self._model_op(node)
        finally:
            self._op_by_op = False
            self.current, self.origin = saved

    def _claimed(self, v, spec):
        """`v` claiming what DTensor says it holds. A DTensor of a sub-mesh (tensor
        parallelism inside data parallelism) speaks of the tensor its own mesh sees:
        the rank's batch rows of an activation, its share of a gradient summed over
        the batch. Along the dims it splits, and for the share of a sum over its own
        mesh, it says what the value holds; the rest comes from the data flow (the
        claim the value's op implies)."""
        full = self.S.dims(self._tensor_name(v.claim.tensor))
        dt_shape = tuple(int(d) for d in spec.shape)
        if len(dt_shape) != len(full) or any(d > f for d, f in zip(dt_shape, full)):
            # DTensor speaks of a tensor larger than the model's: the program labels
            # the value as something it is not (a whole tensor as a piece of one
            # twice its size). Refuted; the value keeps what its data flow says.
            self.doc.failures.append(dict(
                cls="wrong_claim", tensor=self._tensor_name(v.claim.tensor),
                devices=[self.device],
                message=(f"DTensor says rank {self.device}'s value is a piece of a "
                         f"{list(dt_shape)} tensor {list(spec.placements)} where the "
                         f"model's is {list(full)}"),
                origin=self.origin))
            return v
        claim = C.from_dtensor_spec(spec, v.claim.tensor, self.device)
        # The factor the value holds is the data flow's: DTensor speaks of pieces.
        claim = dataclasses.replace(claim, scale=v.claim.scale)
        if v.id not in self.doc.produced and (claim.part, claim.box) != \
                (v.claim.part, v.claim.box):
            # A plan input keeps what it is loaded as; the value DTensor says otherwise
            # of (a replicated bias made one rank's share of a sum) is a copy of it.
            copy = self.doc.value(self.device, v.claim, v.dtype, v.dims)
            phase = self.origin.get("phase", "forward") if self.origin else "forward"
            if v.dims:  # a slice of all of dim 0: a copy of any dtype
                self.doc.task(self.device, -1, "slice",
                              {"dim": 0, "begin": 0, "end": v.dims[0]}, [v], [copy], phase, -1,
                              self.origin)
                v = copy
            elif v.dtype in ("f64", "f32", "bf16", "f16"):
                self.doc.task(self.device, -1, "scale", {"factor": 1.0}, [v], [copy], phase,
                              -1, self.origin)
                v = copy
        if self._covers_launch_mesh(spec.mesh) and dt_shape == tuple(full):
            self.doc.values[v.id] = dataclasses.replace(v, claim=claim)
            return self.doc.values[v.id]
        implied = v.claim
        box = []
        for d, (b, e) in enumerate(claim.box):
            if (b, e) == (0, dt_shape[d]):
                box.append(tuple(implied.box[d]))
                continue
            offset = 0
            if dt_shape[d] != full[d]:
                offset = self.free_box(full[d], dt_shape[d])[0]
            box.append((offset + b, offset + e))
        # The share of a sum: DTensor's, of a sum over its own mesh, where the data
        # flow says the value is whole; the data flow's where it says more (a
        # gradient summed over sequence positions here and batch rows on the
        # other data-parallel ranks is a share of both sums).
        part, combine = implied.part, implied.combine
        if claim.part != C.FULL and implied.part in (C.FULL, C.EMPTY):
            part, combine = claim.part, claim.combine
        merged = C.Claim(tensor=claim.tensor, box=tuple(box), part=part, combine=combine,
                         torch_says=True, scale=v.claim.scale)
        self.doc.values[v.id] = dataclasses.replace(v, claim=merged)
        return self.doc.values[v.id]

    def _covers_launch_mesh(self, mesh):
        table = getattr(mesh, "_loom_ranks", None)
        size = table.numel() if table is not None else mesh.size()
        total = 1
        for n in self.mesh_sizes:
            total *= n
        return size == total

    def _constant(self, node):
        t = getattr(self.trace.module, node.target)
        from loom.torch.lowered_values import _dtype, _scalar_value
        dtype = _dtype(t, self.origin)
        if t.dim() != 0:
            self.unsupported("a tensor constant in a rank's program")
        return self.fill(_scalar_value(t), dtype, ())

    def _find(self, name):
        if not hasattr(self, "_by_name"):
            self._by_name = {n.name: n for n in self.trace.module.graph.nodes}
        n = self._by_name.get(name)
        if n is None:
            raise CaptureError(f"rank {self.device}: node {name} not found")
        return n

    def _tensor_name(self, tensor_id):
        if not hasattr(self, "_names_by_id"):
            self._names_by_id = {i: n for n, i in self.S.tensor_id.items()}
        return self._names_by_id[tensor_id]



# ---------------------------------------------------------------------------------
# All ranks together.

def build_plan(spec, ranks, mesh_names, mesh_sizes, data_claim, model_name, data_dims=()):
    """The Loom plan (JSON text) of the ranks' programs over `spec`, and the
    lowerings (for the places of failures). `data_dims`: the mesh dims that split
    the batch. The plan's outputs are every rank's updated parameters and optimizer
    states, and its loss where the rank holds the whole loss (doc.loss_output)."""
    S = SpecIndex(spec)
    groups = plan_symmetry.groups_of(ranks)
    doc = lowerings = None
    if groups is not None:
        chosen, lowered = plan_symmetry.bases(groups, mesh_sizes)
        if len(lowered) < len(ranks):
            doc, lowerings = _lowered(S, [ranks[r] for r in lowered], mesh_names, mesh_sizes,
                                      data_claim, model_name, data_dims)
            lowerings = plan_symmetry.extend(doc, lowerings, ranks, mesh_sizes, chosen)
            if lowerings is not None:
                doc.lowered = lowered
    if lowerings is None:
        doc, lowerings = _lowered(S, ranks, mesh_names, mesh_sizes, data_claim, model_name,
                                  data_dims)
    losses = []
    for L in lowerings:
        outs = L.results
        for (kind, name), v in zip(L.trace.outputs, outs):
            if kind == "send":
                continue
            if not isinstance(v, PValue):
                raise CaptureError(f"rank {L.device}: output {name} is not a plan value")
            if kind == "loss":
                losses.append(v)
            else:
                doc.outputs.append(v.id)
    # The loss is an output where every rank holds it whole (tensor parallelism);
    # data-parallel ranks each hold their share of it, and torch never adds them.
    doc.loss_output = bool(losses) and all(v.claim.part == C.FULL for v in losses)
    if doc.loss_output:
        doc.outputs = [v.id for v in losses] + doc.outputs
    assemble_collectives(doc, lowerings, mesh_sizes)
    if any(L.rank.pipeline is not None for L in lowerings):
        repair_sum_parts(doc)
    p2p = pipeline_plan.assemble_sends(doc)
    if any(L.rank.pipeline is not None for L in lowerings):
        doc.order = pipeline_plan.pipeline_order(doc, lowerings, p2p)
    return doc, lowerings


def _lowered(S, ranks, mesh_names, mesh_sizes, data_claim, model_name, data_dims):
    """A plan document with the lowerings of `ranks` (each with its .results)."""
    doc = PlanDocument(S, mesh_names, mesh_sizes, model_name)
    lowerings = [RankLowering(S, rank, doc, data_claim) for rank in ranks]
    published = {}
    for L in lowerings:
        L.data_dims = tuple(data_dims)
        L.mesh_sizes = tuple(mesh_sizes)
        L.published = published
        L.used = {}  # micro-batch (None: none) -> the spec nodes its ops were matched to
    for L, outs in zip(lowerings, _lower_together(lowerings, published)):
        L.results = outs
    return doc, lowerings


def _lower_together(lowerings, published):
    """Runs the ranks' lowerings (RankLowering.steps) side by side: one that needs
    what another sends waits until that one has lowered it."""
    steps = [L.steps() for L in lowerings]
    wanted = [None] * len(lowerings)
    results = [None] * len(lowerings)
    running = set(range(len(lowerings)))
    first = set(running)
    while running:
        progressed = False
        for i in sorted(running):
            L = lowerings[i]
            answer = None
            if wanted[i] is not None:
                answer = published.get(pipeline_plan.sender_of(L, wanted[i]))
                if answer is None:
                    continue
            try:
                wanted[i] = next(steps[i]) if i in first else steps[i].send(answer)
            except StopIteration as done:
                results[i] = done.value
                running.discard(i)
            first.discard(i)
            progressed = True
        if not progressed:
            waits = ", ".join(f"rank {lowerings[i].device} waits for {wanted[i]}"
                              for i in sorted(running))
            raise CaptureError(f"the pipeline's stages wait on each other: {waits}")
    return results
