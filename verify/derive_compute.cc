// Deriver: what a compute task's outputs hold, from its operands and its logical op;
// and the local merge of partial softmaxes (attention_merge).

#include "verify/derive_internal.h"

namespace loom::verify::derivation {

bool Deriver::FailPiece(const ComputePiece& p, FailureClass cls, std::string message,
                        std::string counterexample) {
  Fail(cls, p.item, p.devs, p.mb, p.place, p.first_op, std::move(message),
       std::move(counterexample));
  OutputsFromClaims(p.task->outputs);
  return false;
}

bool Deriver::UndecidePiece(const ComputePiece& p, std::string reason) {
  Undecide(p.item, std::move(reason));
  for (ValueId v : p.task->outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
  return false;
}

void Deriver::DeriveCompute(const ir::Task& t) {
  ComputePiece p;
  p.task = &t;
  p.op = &spec_.op(t.op);
  p.item = TaskName(t);
  p.mb = t.info.microbatch;
  p.devs = {t.device};
  p.first_op = OpName(t.op);
  p.place = t.outputs.empty() ? ir::kNoId : t.outputs[0];
  const ir::Op& o = *p.op;
  if (t.kind != o.kind || t.outputs.size() != o.outputs.size()) {
    FailPiece(p, FailureClass::kComputationDiffers,
              absl::StrCat("computes '", ir::OpKindName(t.kind), "' with ", t.inputs.size(),
                           " inputs where the spec computes '", ir::OpKindName(o.kind), "' with ",
                           o.inputs.size()),
              absl::StrCat("with every input equal to 1: the task computes '",
                           ir::OpKindName(t.kind), "' of ", t.inputs.size(),
                           " inputs where the spec computes '", ir::OpKindName(o.kind), "' of ",
                           o.inputs.size()));
    return;
  }
  std::vector<ValueId> in_spec_order;
  if (!CheckOperands(t, o, p.item, p.first_op, &in_spec_order)) {
    OutputsFromClaims(t.outputs);
    return;
  }
  if (!in_spec_order.empty()) {
    // A commutative op's operands in another order: derived as the op reads them.
    ir::Task reordered = t;
    reordered.inputs = std::move(in_spec_order);
    return DeriveCompute(reordered);
  }
  p.types = &TypesOf(t.op);
  if (!p.types->sig.ok()) {
    UndecidePiece(p, absl::StrCat("no partition signature: ", p.types->sig.status().message()));
    return;
  }
  p.sig = &*p.types->sig;
  if (!UnscaleOperands(p) || !LabelIntervals(p) || !OutputBoxes(p) ||
      !OutputContributions(p) || !PieceAttributes(p)) {
    return;
  }
  RecordLaw(p);
  for (size_t k = 0; k < t.outputs.size(); ++k) {
    Fact f;
    f.known = true;
    f.tensor = o.outputs[k];
    f.box = p.out_boxes[k];
    f.contrib = contribs_.Scaled(p.out_contrib[k], p.out_factor);
    SetOutput(t.outputs[k], std::move(f), p.item, p.mb, p.first_op, kTaskRule);
  }
}

// What each operand holds, its factor taken out (a value the program scaled on
// its way: a rank's gradient of its own mean loss); the piece is derived from the
// unscaled operands and the output takes the factor the op's homogeneity gives.
bool Deriver::UnscaleOperands(ComputePiece& p) {
  const ir::Task& t = *p.task;
  const ir::Op& o = *p.op;
  for (ValueId v : t.inputs) p.in.push_back(facts_[v]);
  std::vector<ir::Rational> factor(p.in.size(), ir::Rational::One());
  for (size_t i = 0; i < p.in.size(); ++i) {
    const ContribStore::Unscaled u = contribs_.Unscale(p.in[i].contrib);
    factor[i] = u.factor;
    p.in[i].contrib = u.base;
  }
  std::vector<char> zero(p.in.size(), 0);
  for (size_t i = 0; i < p.in.size(); ++i) {
    zero[i] = p.in[i].contrib == kZeroContrib || IsZeroFill(o.inputs[i]);
  }
  AsEvenShares(o.kind, *p.types, p.in, factor, zero);
  const PieceScale scale = ScaleOfPiece(o.kind, p.types->in, p.types->out, factor, zero);
  if (scale.operand >= 0) {
    const int i = scale.operand;
    return FailPiece(p, FailureClass::kScaled,
                     absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name,
                                  "') holds ", factor[i].ToString(), " times its piece, but '",
                                  ir::OpKindName(o.kind), "' ", scale.why, " (scaled by ",
                                  factor[i].ToString(), ")"),
                     absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name,
                                  "') equal to ", factor[i].ToString(), " where the spec's is 1: '",
                                  ir::OpKindName(o.kind), "' ", scale.why));
  }
  p.out_factor = scale.factor;
  return true;
}

// Each label's interval, from every input dim carrying it. A label may carry dims
// of different extents (a reshape's head factor): pieces must cover the same
// fraction of each. Labels the op needs whole must be whole, coupled labels split
// alike.
bool Deriver::LabelIntervals(ComputePiece& p) {
  const ir::Task& t = *p.task;
  const ir::Op& o = *p.op;
  const ir::DimSignature& sig = *p.sig;
  const std::vector<ir::TensorType>& in_types = p.types->in;
  auto& interval = p.interval;
  auto& extent = p.extent;
  auto ext = [&](size_t i, size_t d) { return in_types[i].shape.dim(static_cast<int>(d)); };
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const Fact& f = p.in[i];
    const auto& labels = sig.inputs[i];
    for (size_t d = 0; d < labels.size() && d < f.box.size(); ++d) {
      const std::string& l = labels[d];
      auto it = interval.find(l);
      if (it == interval.end()) {
        interval[l] = f.box[d];
        extent[l] = ext(i, d);
      } else if (it->second.begin * ext(i, d) != f.box[d].begin * extent[l] ||
                 it->second.end * ext(i, d) != f.box[d].end * extent[l]) {
        return FailPiece(
            p, FailureClass::kWrongShard,
            absl::StrCat("operand ", i, " ('", spec_.tensor(f.tensor).name, "') covers [",
                         f.box[d].begin, ":", f.box[d].end, ") of dim ", d, " (label ", l,
                         ") but another operand covers [", it->second.begin, ":",
                         it->second.end, ")"),
            absl::StrCat("with index j along label ", l, ": operand ", i, " brings j = ",
                         f.box[d].begin, "..", f.box[d].end - 1, " of ", ext(i, d),
                         " where another operand brings j = ", it->second.begin, "..",
                         it->second.end - 1, " of ", extent[l], ", so the piece pairs j = ",
                         f.box[d].begin, " with j = ", it->second.begin));
      }
    }
  }
  for (const auto& [l, kind] : sig.kinds) {
    if (interval.count(l) == 0) continue;
    const bool whole = interval[l].begin == 0 && interval[l].end == extent[l];
    if (kind == ir::DimKind::kFixed && !whole) {
      return FailPiece(
          p, FailureClass::kWrongShard,
          absl::StrCat("splits dim label ", l, " which '", ir::OpKindName(o.kind),
                       "' needs whole (covers [", interval[l].begin, ":", interval[l].end,
                       ") of ", extent[l], ")"),
          absl::StrCat("with index j along label ", l, ": the piece runs on j = ",
                       interval[l].begin, "..", interval[l].end - 1,
                       " as if they were all of it (its own 0..", interval[l].size() - 1,
                       "), where '", ir::OpKindName(o.kind), "' needs j = 0..", extent[l] - 1,
                       " together"));
    }
  }
  for (const auto& group : sig.coupled) {
    for (size_t k = 1; k < group.size(); ++k) {
      const std::string& a = group[0];
      const std::string& b = group[k];
      if (interval.count(a) == 0 || interval.count(b) == 0) continue;
      const Interval ia = interval[a], ib = interval[b];
      if (ia.begin * extent[b] != ib.begin * extent[a] ||
          ia.end * extent[b] != ib.end * extent[a]) {
        return FailPiece(
            p, FailureClass::kWrongShard,
            absl::StrCat("coupled labels ", a, " and ", b, " are split differently"),
            absl::StrCat("the piece pairs ", a, " = ", ia.begin, "..", ia.end - 1, " of ",
                         extent[a], " with ", b, " = ", ib.begin, "..", ib.end - 1, " of ",
                         extent[b], ", which the op never pairs"));
      }
    }
  }
  return true;
}

// The region of each output the piece computes: an output label's interval
// scaled to its dim, an output-only label by the labels it is coupled with.
bool Deriver::OutputBoxes(ComputePiece& p) {
  const ir::Task& t = *p.task;
  const ir::Op& o = *p.op;
  const ir::DimSignature& sig = *p.sig;
  const std::vector<ir::TensorType>& out_types = p.types->out;
  auto& interval = p.interval;
  auto& extent = p.extent;
  for (size_t k = 0; k < t.outputs.size(); ++k) {
    Box b;
    const auto& labels = sig.outputs[k];
    for (size_t d = 0; d < labels.size(); ++d) {
      const int64_t e = out_types[k].shape.dim(static_cast<int>(d));
      auto it = interval.find(labels[d]);
      std::string l = labels[d];
      if (it == interval.end()) {
        // An output-only label follows the labels it is coupled with.
        for (const auto& group : sig.coupled) {
          if (std::find(group.begin(), group.end(), labels[d]) == group.end()) continue;
          for (const std::string& partner : group) {
            if (interval.count(partner) > 0) {
              it = interval.find(partner);
              l = partner;
              break;
            }
          }
        }
      }
      if (it == interval.end()) {
        // A piece of pick_grad or embedding_grad writes the vocabulary range its
        // attributes place it at: the one its output claims, to which the attribute
        // check below holds it. Any other output-only label is computed whole.
        const Box& claimed = plan_.values[t.outputs[k]].sub.box;
        if (WritesClaimedVocabRange(o.kind) && claimed.size() == labels.size() &&
            claimed[d].begin >= 0 && claimed[d].end <= e) {
          b.push_back(claimed[d]);
        } else {
          b.push_back(Interval{0, e});
        }
        continue;
      }
      const int64_t le = extent[l];
      if ((it->second.begin * e) % le != 0 || (it->second.end * e) % le != 0) {
        return FailPiece(
            p, FailureClass::kWrongShard,
            absl::StrCat("label ", l, " covers [", it->second.begin, ":", it->second.end,
                         ") of ", le, ", which is no whole part of output dim ", d, " (", e,
                         ")"),
            absl::StrCat("[", it->second.begin, ":", it->second.end, ") of ", le,
                         " maps to output rows [", it->second.begin * e, "/", le, ":",
                         it->second.end * e, "/", le, ") of ", e, ", not whole rows"));
      }
      b.push_back(Interval{it->second.begin * e / le, it->second.end * e / le});
    }
    p.out_boxes.push_back(std::move(b));
  }
  return true;
}

namespace {

// A causal op's piece (attention's) pairs a block of queries with a chunk of keys.
// Keys after the block's last query are seen by none of its queries, and queries
// before the chunk's first key see none of its keys: their terms are zero (or, for a
// softmax, nothing to merge), so the piece's chunk of a reduction over the keys
// reaches to the last key, and of one over the queries back to the first query. The
// laws (verify/laws.h) leave out the sibling pieces that see nothing likewise.
void CausalChunk(const ir::Op& o, const std::map<std::string, Interval>& interval,
                 const std::map<std::string, int64_t>& extent,
                 const std::vector<std::string>& reduced, Box& chunk) {
  const ir::OpSchema& schema = ir::GetOpSchema(o.kind);
  const std::optional<int64_t> shift = ir::CausalShift(schema, o.attrs);
  if (!shift.has_value()) return;
  const std::string& ql = schema.causal_mask->queries;
  const std::string& kl = schema.causal_mask->keys;
  auto s = interval.find(ql);
  auto t = interval.find(kl);
  if (s == interval.end() || t == interval.end()) return;
  for (size_t r = 0; r < reduced.size(); ++r) {
    if (reduced[r] == kl && t->second.end >= s->second.end + *shift) {
      chunk[r].end = extent.at(kl);
    } else if (reduced[r] == ql && s->second.begin + *shift <= t->second.begin) {
      chunk[r].begin = 0;
    }
  }
}

}  // namespace

// What each output holds of its tensor: the full value, a chunk of a split
// reduction (summed or maxed with the other chunks), or the op applied to the
// partial operands it is linear in.
bool Deriver::OutputContributions(ComputePiece& p) {
  const ir::Task& t = *p.task;
  const ir::Op& o = *p.op;
  const ir::DimSignature& sig = *p.sig;
  auto& interval = p.interval;
  auto& extent = p.extent;
  std::vector<int> partial;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    if (p.in[i].contrib != kFullContrib) partial.push_back(static_cast<int>(i));
  }
  std::vector<std::string> reduced;
  ir::ReduceOp reduce = ir::ReduceOp::kSum;
  for (const auto& [l, kind] : sig.kinds) {
    if (interval.count(l) == 0) continue;
    const bool whole = interval[l].begin == 0 && interval[l].end == extent[l];
    if ((kind == ir::DimKind::kReduction || kind == ir::DimKind::kMaxReduction ||
         kind == ir::DimKind::kLogSumExpReduction) &&
        !whole) {
      reduced.push_back(l);
      if (kind == ir::DimKind::kMaxReduction) reduce = ir::ReduceOp::kMax;
      if (kind == ir::DimKind::kLogSumExpReduction) reduce = ir::ReduceOp::kLogSumExp;
    }
  }
  const std::vector<int>& additive = sig.additive_inputs;
  const bool only_additive_zeros =
      std::all_of(partial.begin(), partial.end(), [&](int i) {
        return p.in[i].contrib == kZeroContrib &&
               std::find(additive.begin(), additive.end(), i) != additive.end();
      });
  // The piece's labels and extents; its bounds, label by label.
  std::string labels_key;
  std::vector<Interval> bounds;
  for (const auto& [l, iv] : interval) {
    absl::StrAppend(&labels_key, l, "/", extent[l], ";");
    bounds.push_back(iv);
  }
  p.out_contrib.assign(t.outputs.size(), kFullContrib);
  if (!reduced.empty() && only_additive_zeros) {
    std::vector<int> add_counts;
    for (int a : additive) {
      add_counts.push_back(p.in[a].contrib == kFullContrib ? 1 : 0);
    }
    const std::vector<std::string> all_reduced = reduced;
    for (size_t k = 0; k < t.outputs.size(); ++k) {
      // An output that keeps a split label as a dim is sliced by it, not summed.
      reduced.clear();
      std::vector<int64_t> ext;
      Box chunk;
      for (const std::string& l : all_reduced) {
        const auto& outl = sig.outputs[k];
        if (std::find(outl.begin(), outl.end(), l) != outl.end()) continue;
        reduced.push_back(l);
        ext.push_back(extent[l]);
        chunk.push_back(interval[l]);
      }
      if (reduced.empty()) continue;
      CausalChunk(o, interval, extent, reduced, chunk);
      Family fam;
      fam.op = t.op;
      fam.output = static_cast<int>(k);
      fam.key = absl::StrCat(t.op, "/", k, "/", ir::ReduceOpName(reduce), "/",
                             absl::StrJoin(reduced, ","));
      fam.labels = reduced;
      fam.extents = ext;
      fam.reduce = reduce;
      fam.num_additive = static_cast<int>(additive.size());
      fam.what = p.first_op;
      const int id = contribs_.InternFamily(std::move(fam));
      p.out_contrib[k] = contribs_.Red(id, {chunk}, add_counts);
    }
  } else if (!partial.empty()) {
    if (!reduced.empty()) {
      return UndecidePiece(p, "partial operands into a piece that also splits a reduction");
    }
    const std::vector<int>* group = nullptr;
    const auto groups = LinearGroups(o.kind, p.types->in, p.types->out);
    for (const auto& g : groups) {
      if (Subset(partial, g)) {
        group = &g;
        break;
      }
    }
    if (group == nullptr) {
      const int i = partial[0];
      const bool zero = p.in[i].contrib == kZeroContrib;
      const ContribId held = p.in[i].contrib;
      return FailPiece(p,
                       zero || !contribs_.HoldsPartialSum(held) ? FailureClass::kMissingPiece
                                                                : FailureClass::kMissingReduction,
                       absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name,
                                    "') holds ", contribs_.Describe(held), ", but '",
                                    ir::OpKindName(o.kind), "' needs it complete"),
                       absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name,
                                    "'): ", contribs_.Example(held)));
    }
    std::vector<ContribId> parts;
    std::vector<std::string> operands;
    for (int i : *group) {
      parts.push_back(p.in[i].contrib);
      operands.push_back(absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name, "')"));
    }
    p.linear_group = *group;
    for (size_t k = 0; k < t.outputs.size(); ++k) {
      const int desc = contribs_.InternDesc(
          t.op, static_cast<int>(k), absl::StrCat(labels_key, "/", absl::StrJoin(*group, ",")),
          bounds, OpName(t.op, static_cast<int>(k)), operands);
      p.out_contrib[k] = contribs_.Lin(desc, parts);
    }
  }
  return true;
}

// The piece's attributes: those the op's schema gives the piece, else the op's
// own; a factor or divisor set to another value scales the output by their ratio.
bool Deriver::PieceAttributes(ComputePiece& p) {
  const ir::Task& t = *p.task;
  const ir::Op& o = *p.op;
  ir::AttrMap expected = o.attrs;
  if (ir::GetOpSchema(o.kind).shard_attrs != nullptr) {
    std::vector<Box> in_boxes;
    for (ValueId v : t.inputs) in_boxes.push_back(facts_[v].box);
    auto a = ir::GetOpSchema(o.kind).shard_attrs(o.attrs, p.types->in, in_boxes, p.types->out,
                                                 p.out_boxes);
    if (!a.ok()) {
      return FailPiece(p, FailureClass::kWrongShard,
                       absl::StrCat("this piece of '", ir::OpKindName(o.kind),
                                    "' has no valid attributes: ", a.status().message()),
                       absl::StrCat("the piece's input regions (",
                                    absl::StrJoin(in_boxes, ", ",
                                                  [](std::string* out, const Box& b) {
                                                    absl::StrAppend(out, ir::BoxToString(b));
                                                  }),
                                    ") are no piece of '", ir::OpKindName(o.kind), "': ",
                                    a.status().message()));
    }
    expected = *std::move(a);
  }
  const ir::SameComputationFn same = ir::GetOpSchema(o.kind).same_computation;
  if (t.attrs != expected && same != nullptr) {
    std::vector<ir::TensorType> in;
    for (ValueId v : t.inputs) {
      in.push_back({ir::Shape(ir::BoxDims(facts_[v].box)), plan_.values[v].dtype});
    }
    if (same(t.attrs, expected, in)) return true;
  }
  if (t.attrs != expected) {
    // A factor the output is proportional to (or a divisor it is inversely
    // proportional to), set to another value: the piece times their ratio.
    std::optional<ir::Rational> ratio = AttributeFactor(t, o, expected);
    if (!ratio.has_value()) {
      FailAttributes(t, o, expected, p.item, p.first_op);
      OutputsFromClaims(t.outputs);
      return false;
    }
    std::optional<ir::Rational> total = ir::Multiply(p.out_factor, *ratio);
    if (!total.has_value()) {
      return UndecidePiece(p, "a factor beyond exact arithmetic");
    }
    p.out_factor = *total;
  }
  return true;
}

// The law this piece relies on, recorded once per key.
void Deriver::RecordLaw(const ComputePiece& p) {
  LawUse law;
  law.kind = p.op->kind;
  law.op = p.task->op;
  law.inputs = p.types->in;
  law.attrs = p.op->attrs;
  for (const auto& [l, iv] : p.interval) {
    law.labels.push_back(l);
    law.intervals.push_back(iv);
    law.extents.push_back(p.extent.at(l));
  }
  law.partial_inputs = p.linear_group;
  law.key = LawKey(law);
  auto [it, fresh] = laws_.emplace(law.key, std::move(law));
  if (fresh && on_law_) on_law_(it->second);
}

// A local attention_merge: two partial softmaxes of one attention, each a value
// (the attention's output 0) and its log-sum-exp (output 1) over the same chunk of
// keys, merged into the softmax over both chunks.
void Deriver::DeriveMerge(const ir::Task& t) {
  const std::string item = TaskName(t);
  const int mb = t.info.microbatch;
  const int64_t dev = t.device;
  if (t.inputs.size() != 4 || t.outputs.size() != 2) {
    Undecide(item, "attention_merge without its four operands and two results");
    OutputsFromClaims(t.outputs);
    for (ValueId v : t.outputs) facts_[v].contrib = kBadContrib;
    return;
  }
  const Fact* in[4];
  for (int i = 0; i < 4; ++i) in[i] = &facts_[t.inputs[i]];
  // Which chunks of which attention output a partial softmax holds.
  auto chunks_of = [&](const Fact& f) -> std::pair<const Family*, const std::vector<Box>*> {
    const Contrib& c = contribs_.get(contribs_.Unscale(f.contrib).base);
    if (c.kind != Contrib::kRed) return {nullptr, nullptr};
    return {&contribs_.family(c.family), &c.chunks};
  };
  for (int pair = 0; pair < 2; ++pair) {
    const Fact& value = *in[2 * pair];
    const Fact& lse = *in[2 * pair + 1];
    const auto [vf, vc] = chunks_of(value);
    const auto [lf, lc] = chunks_of(lse);
    if (vf == nullptr || lf == nullptr) continue;  // the merge below names what they hold
    const bool same_rows = value.box.size() == lse.box.size() + 1 &&
                           std::equal(lse.box.begin(), lse.box.end(), value.box.begin());
    if (vf->op != lf->op || vf->output != 0 || lf->output != 1 || *vc != *lc || !same_rows) {
      Fail(FailureClass::kComputationDiffers, item, {dev}, mb, t.outputs[0], "",
           absl::StrCat("merges operand ", 2 * pair, " (", contribs_.Describe(value.contrib),
                        " of '", TensorName(value.tensor), "') with the log-sum-exp of another "
                        "piece (", contribs_.Describe(lse.contrib), " of '",
                        TensorName(lse.tensor), "')"),
           absl::StrCat("with every score 0 and every value 1: a partial softmax over n keys "
                        "is weighted by n in the merge; operand ", 2 * pair + 1,
                        " weighs another piece's keys"));
      OutputsFromClaims(t.outputs);
      return;
    }
  }
  auto value = Combine({*in[0], *in[2]}, ir::ReduceOp::kLogSumExp, item, {dev}, mb, t.outputs[0]);
  if (!value) {
    OutputsFromClaims(t.outputs);
    return;
  }
  auto lse = Combine({*in[1], *in[3]}, ir::ReduceOp::kLogSumExp, item, {dev}, mb, t.outputs[1]);
  if (!lse) {
    OutputsFromClaims(t.outputs);
    return;
  }
  SetOutput(t.outputs[0], *std::move(value), item, mb, "", kTaskRule);
  SetOutput(t.outputs[1], *std::move(lse), item, mb, "", kTaskRule);
}

}  // namespace loom::verify::derivation
