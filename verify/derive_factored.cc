// Deriver: the phantoms and replica checks of a sliced factored plan
// (verify/factored.h).

#include "verify/derive_internal.h"

namespace loom::verify::derivation {

std::string Deriver::OpOutputName(ir::OpId op, int k) const { return OpName(op, k); }

ContribId Deriver::MapMicrobatch(ContribId c, int m) {
  const ir::MicrobatchMap& map = sliced_->mbmap;
  return contribs_.MapOps(
      c, [&](ir::OpId op) { return map.Op(op, m); },
      [&](ir::OpId op, int k) { return OpOutputName(op, k); },
      [&](TensorId t) { return map.Tensor(t, m); }, [&](TensorId t) { return TensorName(t); });
}

void Deriver::DerivePhantom(const Phantom& p) {
  const ir::PlanValue& pv = plan_.values[p.value];
  const std::string item =
      p.microbatch >= 1
          ? absl::StrCat("value ", p.value, " (micro-batch ", p.microbatch, " copy of value ",
                         p.src0, ")")
          : absl::StrCat("value ", p.value, " (replica ", p.replica, ", following values ",
                         p.src0, " and ", p.src1, " of replicas 0 and 1)");
  auto bad = [&] {
    facts_[p.value] = FromClaim(p.value);
    facts_[p.value].contrib = kBadContrib;
  };
  const Fact& a = facts_[p.src0];
  if (!a.known || a.contrib == kBadContrib) return bad();
  Fact f = a;
  if (p.microbatch >= 1) {
    f.tensor = sliced_->mbmap.Tensor(a.tensor, p.microbatch);
    f.contrib = MapMicrobatch(a.contrib, p.microbatch);
  } else {
    const Fact& b = facts_[p.src1];
    if (!b.known || b.contrib == kBadContrib) return bad();
    auto x = Extrapolate(a, b, p.replica);
    if (!x.has_value()) {
      Undecide(item, absl::StrCat("replicas 0 and 1 hold ", contribs_.Describe(a.contrib), " ",
                                  ir::BoxToString(a.box), " and ", contribs_.Describe(b.contrib),
                                  " ", ir::BoxToString(b.box),
                                  ", which do not extrapolate to replica ", p.replica,
                                  "; verify the explicit plan"));
      return bad();
    }
    f = *std::move(x);
  }
  SetOutput(p.value, std::move(f), item, pv.microbatch, "", kTaskRule);
}

std::optional<Fact> Deriver::Extrapolate(const Fact& a, const Fact& b, int64_t t) {
  if (a.tensor != b.tensor || a.box.size() != b.box.size()) return std::nullopt;
  Fact f = a;
  for (size_t d = 0; d < f.box.size(); ++d) {
    f.box[d].begin += t * (b.box[d].begin - a.box[d].begin);
    f.box[d].end += t * (b.box[d].end - a.box[d].end);
    if (f.box[d].begin < 0 || f.box[d].begin > f.box[d].end) return std::nullopt;
  }
  auto c = contribs_.Extrapolate(a.contrib, b.contrib, t);
  if (!c.has_value()) return std::nullopt;
  f.contrib = *c;
  return f;
}

bool Deriver::MicrobatchInvariantInputs(const std::vector<ValueId>& inputs, int mb,
                                        const std::string& item,
                                        const std::vector<ValueId>& outputs) {
  if (sliced_ == nullptr || mb != 0 || sliced_->microbatches < 2) return true;
  for (ValueId v : inputs) {
    if (plan_.values[v].microbatch != -1) continue;
    const ContribId c = facts_[v].contrib;
    if (c == kFullContrib || c == kZeroContrib || c == kBadContrib) continue;
    if (MapMicrobatch(c, 1) == c) continue;
    // Copy m of this item would read the same value, whose contents are not the
    // micro-batch-m image of what copy 0 reads: copies are not renamings.
    Undecide(item, absl::StrCat("every micro-batch's copy reads value ", v, ", which holds ",
                                contribs_.Describe(c),
                                "; the copies are not alike, verify the explicit plan"));
    for (ValueId o : outputs) facts_[o] = FromClaim(o), facts_[o].contrib = kBadContrib;
    return false;
  }
  return true;
}

void Deriver::CheckReplicas(const std::function<bool(ValueId)>* walked) {
  if (sliced_ == nullptr) return;
  for (const auto& [v0, v1] : sliced_->same_in_every_replica) {
    if (walked != nullptr && !((*walked)(v0) && (*walked)(v1))) continue;
    const Fact& a = facts_[v0];
    const Fact& b = facts_[v1];
    if (a.tensor == b.tensor && a.box == b.box && a.contrib == b.contrib) continue;
    Undecide(absl::StrCat("output value ", v1, " (replica 1)"),
             absl::StrCat("holds ", contribs_.Describe(b.contrib), " ", ir::BoxToString(b.box),
                          " where replica 0's copy (value ", v0, ") holds ",
                          contribs_.Describe(a.contrib), " ", ir::BoxToString(a.box),
                          ", though its claim is the same in every replica"));
  }
  const int64_t last = sliced_->dp - 1;
  for (const auto& t : sliced_->replica_checks) {
    if (walked != nullptr && !((*walked)(t.r0) && (*walked)(t.r1) && (*walked)(t.last))) continue;
    const Fact& a = facts_[t.r0];
    const Fact& b = facts_[t.r1];
    const Fact& l = facts_[t.last];
    if (!a.known || !b.known || !l.known || a.contrib == kBadContrib ||
        b.contrib == kBadContrib || l.contrib == kBadContrib) {
      continue;  // reported where it went wrong
    }
    auto x = Extrapolate(a, b, last);
    if (x.has_value() && x->tensor == l.tensor && x->box == l.box && x->contrib == l.contrib) {
      continue;
    }
    Undecide(absl::StrCat("value ", t.last, " (replica ", last, ")"),
             absl::StrCat("holds ", contribs_.Describe(l.contrib), " ", ir::BoxToString(l.box),
                          ", not what replicas 0 and 1 (values ", t.r0, " and ", t.r1,
                          ") extrapolate to; verify the explicit plan"));
  }
}

}  // namespace loom::verify::derivation
