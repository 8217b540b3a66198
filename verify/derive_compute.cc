// Deriver: what a compute task's outputs hold, from its operands and its logical op.

#include "verify/derive_internal.h"

namespace loom::verify::derivation {

void Deriver::DeriveCompute(const ir::Task& t) {
  const std::string item = TaskName(t);
  const int mb = t.info.microbatch;
  const std::vector<int64_t> devs = {t.device};
  const ir::Op& o = spec_.op(t.op);
  const std::string first_op = OpName(t.op);
  const ValueId place = t.outputs.empty() ? ir::kNoId : t.outputs[0];
  if (t.kind != o.kind || t.outputs.size() != o.outputs.size()) {
    Fail(FailureClass::kComputationDiffers, item, devs, mb, place, first_op,
         absl::StrCat("computes '", ir::OpKindName(t.kind), "' with ", t.inputs.size(),
                      " inputs where the spec computes '", ir::OpKindName(o.kind), "' with ",
                      o.inputs.size()),
         absl::StrCat("with every input equal to 1: the task computes '", ir::OpKindName(t.kind),
                      "' of ", t.inputs.size(), " inputs where the spec computes '",
                      ir::OpKindName(o.kind), "' of ", o.inputs.size()));
    OutputsFromClaims(t.outputs);
    return;
  }
  std::vector<ValueId> in_spec_order;
  if (!CheckOperands(t, o, item, first_op, &in_spec_order)) {
    OutputsFromClaims(t.outputs);
    return;
  }
  if (!in_spec_order.empty()) {
    // A commutative op's operands in another order: derived as the op reads them.
    ir::Task reordered = t;
    reordered.inputs = std::move(in_spec_order);
    return DeriveCompute(reordered);
  }
  const ir::OpSchema& schema = ir::GetOpSchema(o.kind);
  const OpTypes& types = TypesOf(t.op);
  const std::vector<ir::TensorType>& in_types = types.in;
  const std::vector<ir::TensorType>& out_types = types.out;
  const absl::StatusOr<ir::DimSignature>& sig = types.sig;
  if (!sig.ok()) {
    Undecide(item, absl::StrCat("no partition signature: ", sig.status().message()));
    for (ValueId v : t.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
    return;
  }
  // What each operand holds, its factor taken out (a value the program scaled on
  // its way: a rank's gradient of its own mean loss); the piece is derived from the
  // unscaled operands and the output takes the factor the op's homogeneity gives.
  std::vector<Fact> in;
  for (ValueId v : t.inputs) in.push_back(facts_[v]);
  ir::Rational out_factor = ir::Rational::One();
  {
    std::vector<ir::Rational> factor(in.size(), ir::Rational::One());
    for (size_t i = 0; i < in.size(); ++i) {
      const ContribStore::Unscaled u = contribs_.Unscale(in[i].contrib);
      factor[i] = u.factor;
      in[i].contrib = u.base;
    }
    std::vector<char> zero(in.size(), 0);
    for (size_t i = 0; i < in.size(); ++i) {
      zero[i] = in[i].contrib == kZeroContrib || IsZeroFill(o.inputs[i]);
    }
    const OpTypes& op_types = TypesOf(t.op);
    AsEvenShares(o.kind, op_types, in, factor, zero);
    const PieceScale scale = ScaleOfPiece(o.kind, op_types.in, op_types.out, factor, zero);
    if (scale.operand >= 0) {
      const int i = scale.operand;
      Fail(FailureClass::kScaled, item, devs, mb, place, first_op,
           absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name, "') holds ",
                        factor[i].ToString(), " times its piece, but '", ir::OpKindName(o.kind),
                        "' ", scale.why, " (scaled by ", factor[i].ToString(), ")"),
           absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name,
                        "') equal to ", factor[i].ToString(), " where the spec's is 1: '",
                        ir::OpKindName(o.kind), "' ", scale.why));
      OutputsFromClaims(t.outputs);
      return;
    }
    out_factor = scale.factor;
  }
  // Each label's interval, from every input dim carrying it.
  // A label may carry dims of different extents (a reshape's head factor): pieces
  // must cover the same fraction of each.
  std::map<std::string, Interval> interval;
  std::map<std::string, int64_t> extent;
  auto ext = [&](size_t i, size_t d) { return in_types[i].shape.dim(static_cast<int>(d)); };
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const Fact& f = in[i];
    const auto& labels = sig->inputs[i];
    for (size_t d = 0; d < labels.size() && d < f.box.size(); ++d) {
      const std::string& l = labels[d];
      auto it = interval.find(l);
      if (it == interval.end()) {
        interval[l] = f.box[d];
        extent[l] = in_types[i].shape.dim(static_cast<int>(d));
      } else if (it->second.begin * ext(i, d) != f.box[d].begin * extent[l] ||
                 it->second.end * ext(i, d) != f.box[d].end * extent[l]) {
        Fail(FailureClass::kWrongShard, item, devs, mb, place, first_op,
             absl::StrCat("operand ", i, " ('", spec_.tensor(f.tensor).name, "') covers [",
                          f.box[d].begin, ":", f.box[d].end, ") of dim ", d, " (label ", l,
                          ") but another operand covers [", it->second.begin, ":",
                          it->second.end, ")"),
             absl::StrCat("with index j along label ", l, ": operand ", i, " brings j = ",
                          f.box[d].begin, "..", f.box[d].end - 1, " of ", ext(i, d),
                          " where another operand brings j = ", it->second.begin, "..",
                          it->second.end - 1, " of ", extent[l], ", so the piece pairs j = ",
                          f.box[d].begin, " with j = ", it->second.begin));
        OutputsFromClaims(t.outputs);
        return;
      }
    }
  }
  auto is_full = [&](const std::string& l) {
    return interval[l].begin == 0 && interval[l].end == extent[l];
  };
  for (const auto& [l, kind] : sig->kinds) {
    if (interval.count(l) == 0) continue;
    if (kind == ir::DimKind::kFixed && !is_full(l)) {
      Fail(FailureClass::kWrongShard, item, devs, mb, place, first_op,
           absl::StrCat("splits dim label ", l, " which '", ir::OpKindName(o.kind),
                        "' needs whole (covers [", interval[l].begin, ":", interval[l].end,
                        ") of ", extent[l], ")"),
           absl::StrCat("with index j along label ", l, ": the piece runs on j = ",
                        interval[l].begin, "..", interval[l].end - 1,
                        " as if they were all of it (its own 0..", interval[l].size() - 1,
                        "), where '", ir::OpKindName(o.kind), "' needs j = 0..", extent[l] - 1,
                        " together"));
      OutputsFromClaims(t.outputs);
      return;
    }
  }
  for (const auto& group : sig->coupled) {
    for (size_t k = 1; k < group.size(); ++k) {
      const std::string& a = group[0];
      const std::string& b = group[k];
      if (interval.count(a) == 0 || interval.count(b) == 0) continue;
      const Interval ia = interval[a], ib = interval[b];
      if (ia.begin * extent[b] != ib.begin * extent[a] ||
          ia.end * extent[b] != ib.end * extent[a]) {
        Fail(FailureClass::kWrongShard, item, devs, mb, place, first_op,
             absl::StrCat("coupled labels ", a, " and ", b, " are split differently"),
             absl::StrCat("the piece pairs ", a, " = ", ia.begin, "..", ia.end - 1, " of ",
                          extent[a], " with ", b, " = ", ib.begin, "..", ib.end - 1, " of ",
                          extent[b], ", which the op never pairs"));
        OutputsFromClaims(t.outputs);
        return;
      }
    }
  }
  // Partial operands and split reductions.
  std::vector<int> partial;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    if (in[i].contrib != kFullContrib) partial.push_back(static_cast<int>(i));
  }
  std::vector<std::string> reduced;
  bool max_reduction = false;
  for (const auto& [l, kind] : sig->kinds) {
    if (interval.count(l) == 0) continue;
    if ((kind == ir::DimKind::kReduction || kind == ir::DimKind::kMaxReduction) && !is_full(l)) {
      reduced.push_back(l);
      if (kind == ir::DimKind::kMaxReduction) max_reduction = true;
    }
  }
  const std::vector<int>& additive = sig->additive_inputs;
  const bool only_additive_zeros =
      std::all_of(partial.begin(), partial.end(), [&](int i) {
        return in[i].contrib == kZeroContrib &&
               std::find(additive.begin(), additive.end(), i) != additive.end();
      });
  // Output boxes.
  std::vector<Box> out_boxes;
  for (size_t k = 0; k < t.outputs.size(); ++k) {
    Box b;
    const auto& labels = sig->outputs[k];
    for (size_t d = 0; d < labels.size(); ++d) {
      const int64_t e = out_types[k].shape.dim(static_cast<int>(d));
      auto it = interval.find(labels[d]);
      std::string l = labels[d];
      if (it == interval.end()) {
        // An output-only label follows the labels it is coupled with.
        for (const auto& group : sig->coupled) {
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
        Fail(FailureClass::kWrongShard, item, devs, mb, place, first_op,
             absl::StrCat("label ", l, " covers [", it->second.begin, ":", it->second.end,
                          ") of ", le, ", which is no whole part of output dim ", d, " (", e, ")"),
             absl::StrCat("[", it->second.begin, ":", it->second.end, ") of ", le,
                          " maps to output rows [", it->second.begin * e, "/", le, ":",
                          it->second.end * e, "/", le, ") of ", e, ", not whole rows"));
        OutputsFromClaims(t.outputs);
        return;
      }
      b.push_back(Interval{it->second.begin * e / le, it->second.end * e / le});
    }
    out_boxes.push_back(std::move(b));
  }
  // The piece's labels and extents; its bounds, label by label.
  std::string labels_key;
  std::vector<Interval> bounds;
  for (const auto& [l, iv] : interval) {
    absl::StrAppend(&labels_key, l, "/", extent[l], ";");
    bounds.push_back(iv);
  }
  std::vector<ContribId> out_contrib(t.outputs.size(), kFullContrib);
  std::vector<int> linear_group;  // positions the piece is additive in
  if (!reduced.empty() && only_additive_zeros) {
    std::vector<int> add_counts;
    for (int a : additive) {
      add_counts.push_back(in[a].contrib == kFullContrib ? 1 : 0);
    }
    const std::vector<std::string> all_reduced = reduced;
    for (size_t k = 0; k < t.outputs.size(); ++k) {
      // An output that keeps a split label as a dim is sliced by it, not summed.
      reduced.clear();
      std::vector<int64_t> ext;
      Box chunk;
      for (const std::string& l : all_reduced) {
        const auto& outl = sig->outputs[k];
        if (std::find(outl.begin(), outl.end(), l) != outl.end()) continue;
        reduced.push_back(l);
        ext.push_back(extent[l]);
        chunk.push_back(interval[l]);
      }
      if (reduced.empty()) continue;
      Family fam;
      fam.op = t.op;
      fam.output = static_cast<int>(k);
      fam.key = absl::StrCat(t.op, "/", k, "/", max_reduction ? "max" : "sum", "/",
                             absl::StrJoin(reduced, ","));
      fam.labels = reduced;
      fam.extents = ext;
      fam.reduce = max_reduction ? ir::ReduceOp::kMax : ir::ReduceOp::kSum;
      fam.num_additive = static_cast<int>(additive.size());
      fam.what = first_op;
      const int id = contribs_.InternFamily(std::move(fam));
      out_contrib[k] = contribs_.Red(id, {chunk}, add_counts);
    }
  } else if (!partial.empty()) {
    if (!reduced.empty()) {
      Undecide(item, "partial operands into a piece that also splits a reduction");
      for (ValueId v : t.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
      return;
    }
    const std::vector<int>* group = nullptr;
    const auto groups = LinearGroups(o.kind, in_types, out_types);
    for (const auto& g : groups) {
      if (Subset(partial, g)) {
        group = &g;
        break;
      }
    }
    if (group == nullptr) {
      const int i = partial[0];
      const bool zero = in[i].contrib == kZeroContrib;
      const ContribId held = in[i].contrib;
      Fail(zero || !contribs_.HoldsPartialSum(held) ? FailureClass::kMissingPiece
                                                    : FailureClass::kMissingReduction,
           item, devs, mb, place, first_op,
           absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name, "') holds ",
                        contribs_.Describe(held), ", but '", ir::OpKindName(o.kind),
                        "' needs it complete"),
           absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name, "'): ",
                        contribs_.Example(held)));
      OutputsFromClaims(t.outputs);
      return;
    }
    std::vector<ContribId> parts;
    std::vector<std::string> operands;
    for (int i : *group) {
      parts.push_back(in[i].contrib);
      operands.push_back(absl::StrCat("operand ", i, " ('", spec_.tensor(o.inputs[i]).name, "')"));
    }
    linear_group = *group;
    for (size_t k = 0; k < t.outputs.size(); ++k) {
      const int desc = contribs_.InternDesc(
          t.op, static_cast<int>(k), absl::StrCat(labels_key, "/", absl::StrJoin(*group, ",")),
          bounds, OpName(t.op, static_cast<int>(k)), operands);
      out_contrib[k] = contribs_.Lin(desc, parts);
    }
  }
  // Attributes of the piece.
  ir::AttrMap expected = o.attrs;
  if (schema.shard_attrs != nullptr) {
    std::vector<Box> in_boxes;
    for (ValueId v : t.inputs) in_boxes.push_back(facts_[v].box);
    auto a = schema.shard_attrs(o.attrs, in_types, in_boxes, out_types, out_boxes);
    if (!a.ok()) {
      Fail(FailureClass::kWrongShard, item, devs, mb, place, first_op,
           absl::StrCat("this piece of '", ir::OpKindName(o.kind),
                        "' has no valid attributes: ", a.status().message()),
           absl::StrCat("the piece's input regions (",
                        absl::StrJoin(in_boxes, ", ",
                                      [](std::string* out, const Box& b) {
                                        absl::StrAppend(out, ir::BoxToString(b));
                                      }),
                        ") are no piece of '", ir::OpKindName(o.kind), "': ",
                        a.status().message()));
      OutputsFromClaims(t.outputs);
      return;
    }
    expected = *std::move(a);
  }
  if (t.attrs != expected) {
    // A factor the output is proportional to (or a divisor it is inversely
    // proportional to), set to another value: the piece times their ratio.
    std::optional<ir::Rational> ratio = AttributeFactor(t, o, expected);
    if (!ratio.has_value()) {
      FailAttributes(t, o, expected, item, first_op);
      OutputsFromClaims(t.outputs);
      return;
    }
    std::optional<ir::Rational> total = ir::Multiply(out_factor, *ratio);
    if (!total.has_value()) {
      Undecide(item, "a factor beyond exact arithmetic");
      for (ValueId v : t.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
      return;
    }
    out_factor = *total;
  }
  // The law this piece relies on.
  {
    LawUse law;
    law.kind = o.kind;
    law.op = t.op;
    law.inputs = in_types;
    law.attrs = o.attrs;
    for (const auto& [l, iv] : interval) {
      law.labels.push_back(l);
      law.intervals.push_back(iv);
      law.extents.push_back(extent[l]);
    }
    law.partial_inputs = linear_group;
    law.key = LawKey(law);
    auto [it, fresh] = laws_.emplace(law.key, std::move(law));
    if (fresh && on_law_) on_law_(it->second);
  }
  for (size_t k = 0; k < t.outputs.size(); ++k) {
    Fact f;
    f.known = true;
    f.tensor = o.outputs[k];
    f.box = out_boxes[k];
    f.contrib = contribs_.Scaled(out_contrib[k], out_factor);
    SetOutput(t.outputs[k], std::move(f), item, mb, first_op, kTaskRule);
  }
}

}  // namespace loom::verify::derivation
