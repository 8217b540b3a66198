// Deriver: the walk over the plan (its order, the layer stages and their classes,
// alike and folded stages' presets, share groups) and the coverage of the spec's
// outputs.

#include "verify/derive_internal.h"

namespace loom::verify::derivation {

void Deriver::CheckCoverage() {
  std::map<TensorId, std::vector<ValueId>> by_tensor;
  for (ValueId v : plan_.outputs) by_tensor[plan_.values[v].sub.tensor].push_back(v);
  for (TensorId t : spec_.outputs()) {
    // Covered as the folded layer's representative covers its own (verify/fold.h).
    if (fast_.fold != nullptr && fast_.fold->covered_by.contains(t)) continue;
    const ir::Tensor& tensor = spec_.tensor(t);
    const std::string item = absl::StrCat("output '", tensor.name, "'");
    auto it = by_tensor.find(t);
    if (it == by_tensor.end()) {
      Fail(FailureClass::kMissingPiece, item, {}, -1, ir::kNoId, ProducerName(t),
           absl::StrCat("no plan output holds any piece of '", tensor.name, "'"),
           absl::StrCat("with '", tensor.name, "' equal to 1 in the spec: element ",
                        FirstGap(ir::FullBox(tensor.shape), {}), " is in no plan output"));
      out_.failures.back().tensor = tensor.name;
      continue;
    }
    std::vector<Box> boxes;
    std::set<int64_t> devices;
    bool ok = true;
     for (ValueId v : it->second) {
      const Fact& f = facts_[v];
      devices.insert(plan_.values[v].device);
      if (f.contrib == kBadContrib) {
        ok = false;  // already reported where it went wrong
        continue;
      }
      // What a plan output holds is read as it is (the executor puts outputs
      // together from complete values only): a share claimed there, even on a
      // complete value, promises a sum that no one makes.
      const ir::ValuePart& part = plan_.values[v].sub.part;
      if (!part.IsFull() && f.contrib == kFullContrib) {
        Fail(FailureClass::kWrongClaim, item, {plan_.values[v].device}, -1, v, ProducerName(t),
             absl::StrCat("output value ", v, " holds the complete value of '", tensor.name, "' ",
                          ir::BoxToString(f.box), " but claims share ", part.ToString(),
                          "; plan outputs are read as complete values"),
             absl::StrCat("output value ", v, " of '", tensor.name, "' equal to 1: its claim "
                          "says ", part.ToString(), " of a sum that no collective makes"));
        ok = false;
        continue;
      }
      if (const ContribStore::Unscaled u = contribs_.Unscale(f.contrib);
          u.base == kFullContrib && !u.factor.IsOne()) {
        Fail(FailureClass::kScaled, item, {plan_.values[v].device}, -1, v, ProducerName(t),
             absl::StrCat("output value ", v, " holds ", contribs_.Describe(f.contrib),
                          " (scaled by ", u.factor.ToString(), ")"),
             absl::StrCat("output value ", v, ": ", contribs_.Example(f.contrib)));
        ok = false;
        continue;
      }
      if (f.contrib != kFullContrib) {
        Fail(contribs_.HoldsPartialSum(f.contrib) ? FailureClass::kMissingReduction
                                                  : FailureClass::kMissingPiece,
             item, {plan_.values[v].device}, -1, v, ProducerName(t),
             absl::StrCat("output value ", v, " holds ", contribs_.Describe(f.contrib)),
             absl::StrCat("output value ", v, ": ", contribs_.Example(f.contrib)));
        ok = false;
        continue;
      }
      bool seen = false;
      for (const Box& b : boxes) {
        if (b == f.box) {
          seen = true;  // a replica
        } else if (ir::Intersect(b, f.box).has_value()) {
          const Box both = *ir::Intersect(b, f.box);
          std::vector<int64_t> corner;
          for (const Interval& iv : both) corner.push_back(iv.begin);
          Fail(FailureClass::kDoubledPiece, item, {plan_.values[v].device}, -1, v,
               ProducerName(t),
               absl::StrCat("output regions ", ir::BoxToString(b), " and ",
                            ir::BoxToString(f.box), " overlap"),
               absl::StrCat("element [", absl::StrJoin(corner, ","), "] of '", tensor.name,
                            "' lies in both ", ir::BoxToString(b), " and ", ir::BoxToString(f.box),
                            ": gathering the outputs counts it twice"));
          ok = false;
        }
      }
      if (!seen) boxes.push_back(f.box);
    }
    if (!ok) continue;
    int64_t covered = 0;
    for (const Box& b : boxes) {
      int64_t vol = 1;
      for (const Interval& iv : b) vol *= iv.size();
      covered += vol;
    }
    if (covered != tensor.shape.num_elements()) {
      Fail(FailureClass::kMissingPiece, item,
           std::vector<int64_t>(devices.begin(), devices.end()), -1, ir::kNoId, ProducerName(t),
           absl::StrCat("the plan's outputs cover ", covered, " of the ",
                        tensor.shape.num_elements(), " elements of '", tensor.name, "'"),
           absl::StrCat("with '", tensor.name, "' equal to 1 in the spec: element ",
                        FirstGap(ir::FullBox(tensor.shape), boxes), " is in no plan output"));
      out_.failures.back().tensor = tensor.name;
    }
  }
}

Deriver::Renaming Deriver::MakeRenaming(const Stage& from, const Stage& to) const {
  Renaming r;
  for (size_t i = 0; i < from.ops.size() && i < to.ops.size(); ++i) {
    r.ops.emplace(from.ops[i], to.ops[i]);
  }
  for (size_t i = 0; i < from.tensors.size() && i < to.tensors.size(); ++i) {
    r.tensors.emplace(from.tensors[i], to.tensors[i]);
  }
  return r;
}

ContribId Deriver::Rename(ContribId c, Renaming& r) {
  const ir::MicrobatchMap* mbmap = sliced_ != nullptr ? &sliced_->mbmap : nullptr;
  auto op_map = [&](ir::OpId op) -> ir::OpId {
    auto it = r.ops.find(op);
    if (it != r.ops.end()) return it->second;
    // A micro-batch copy of a renamed op (a phantom's contents).
    const int m = spec_.op(op).info.microbatch;
    const ir::OpId original = mbmap != nullptr && m >= 1 ? mbmap->Op(op, 0) : ir::kNoId;
    if (original != ir::kNoId && original != op) {
      auto base = r.ops.find(original);
      if (base != r.ops.end()) return mbmap->Op(base->second, m);
    }
    r.reached = false;
    return op;
  };
  auto tensor_map = [&](TensorId t) -> TensorId {
    auto it = r.tensors.find(t);
    if (it != r.tensors.end()) return it->second;
    const int m = mbmap != nullptr ? mbmap->TensorMicrobatch(t) : -1;
    const TensorId original = m >= 1 ? mbmap->Tensor(t, 0) : ir::kNoId;
    if (original != ir::kNoId && original != t) {
      auto base = r.tensors.find(original);
      if (base != r.tensors.end()) return mbmap->Tensor(base->second, m);
    }
    r.reached = false;
    return t;
  };
  return contribs_.MapOps(
      c, op_map, [&](ir::OpId op, int k) { return OpOutputName(op, k); }, tensor_map,
      [&](TensorId t) { return TensorName(t); });
}

bool Deriver::PresetAlike(const Stage& first, const std::vector<Fact>& first_facts,
                          const Stage& member) {
  Renaming renaming = MakeRenaming(first, member);
  absl::flat_hash_set<ValueId> outputs(member.boundary_outputs.begin(),
                                       member.boundary_outputs.end());
  for (size_t i = 0; i < member.values.size(); ++i) {
    const ValueId v = member.values[i];
    if (!outputs.contains(v)) continue;
    const Fact& a = first_facts[i];
    const ir::PlanValue& claim = plan_.values[first.values[i]];
    if (!a.known || a.contrib == kBadContrib || a.tensor != claim.sub.tensor ||
        !(a.box == claim.sub.box)) {
      return false;
    }
    Fact f;
    f.known = true;
    f.tensor = plan_.values[v].sub.tensor;
    f.box = plan_.values[v].sub.box;
    f.contrib = &member == &first ? a.contrib : Rename(a.contrib, renaming);
    if (!renaming.reached) return false;
    preset_[v] = std::move(f);
  }
  return true;
}

bool Deriver::PresetFolded(const Stage& first, const std::vector<Fact>& first_facts,
                           const Stage& rep) {
  const LayerFold& fold = *fast_.fold;
  // Where each of rep's values sits in its (and so first's) value list.
  absl::flat_hash_map<ValueId, int> position;
  for (size_t i = 0; i < rep.values.size(); ++i) position.emplace(rep.values[i], static_cast<int>(i));
  Renaming to_rep = MakeRenaming(first, rep);
  absl::flat_hash_map<int, Renaming> to_member;
  auto values = folded_values_.find(rep.layer);
  if (values == folded_values_.end()) return true;
  // Per position in rep's values: what rep's value holds (renamed to rep), and
  // whether that is its claim; every folded stage's value at that position asks.
  enum : char { kUnseen, kClaim, kOther };
  std::vector<char> seen(rep.values.size(), kUnseen);
  std::vector<ContribId> held_at(rep.values.size(), kBadContrib);
  if (preset_claim_.empty()) preset_claim_.assign(plan_.values.size(), 0);
  for (ValueId x : values->second) {
    const SlicedPlan::Origin& o = sliced_->origin[x];
    const int m = fold.value_member[o.unit];
    const LayerFold::Member& member = fold.members[m];
    const Stage& unit_rep = fold.unit.stages[member.rep];
    if (o.microbatch != 0) return false;  // never: copies are phantoms
    // The representative's copy of x in the same replica.
    const ValueId u = unit_rep.values[fold.value_position[o.unit]];
    ValueId twin = ir::kNoId;
    for (size_t slot = 0; slot < sliced_->replicas.size(); ++slot) {
      if (sliced_->replicas[slot] == o.replica) twin = sliced_->real[slot][u];
    }
    if (twin == ir::kNoId) return false;
    auto at = position.find(twin);
    if (at == position.end()) return false;
    const int p = at->second;
    if (seen[p] == kUnseen) {
      const Fact& a = first_facts[p];
      const ir::PlanValue& claim = plan_.values[twin];
      if (!a.known || a.contrib == kBadContrib || a.tensor != claim.sub.tensor ||
          !(a.box == claim.sub.box)) {
        return false;
      }
      held_at[p] = &rep == &first ? a.contrib : Rename(a.contrib, to_rep);
      if (!to_rep.reached) return false;
      seen[p] = held_at[p] == FromClaim(twin).contrib ? kClaim : kOther;
    }
    const ContribId held = held_at[p];
    if (seen[p] == kClaim) {
      preset_claim_[x] = 1;
      continue;
    }
    auto [it, fresh] = to_member.try_emplace(m);
    if (fresh) it->second = MakeRenaming(unit_rep, fold.unit.stages[member.stage]);
    Fact f;
    f.known = true;
    f.tensor = plan_.values[x].sub.tensor;
    f.box = plan_.values[x].sub.box;
    f.contrib = Rename(held, it->second);
    if (!it->second.reached) return false;
    preset_[x] = std::move(f);
  }
  return true;
}

void Deriver::ShareGroupsFromUnit() {
  const std::vector<int>& unit_group = fast_.fold->unit.share_group;
  absl::flat_hash_map<std::tuple<int, int64_t, int>, int> ids;
  const ValueId nv = static_cast<ValueId>(plan_.values.size());
  share_group_.assign(nv, -1);
  for (ValueId x = 0; x < nv; ++x) {
    const SlicedPlan::Origin& o = sliced_->origin[x];
    const int g = unit_group[o.unit];
    if (g < 0) continue;
    auto [it, fresh] = ids.try_emplace(std::make_tuple(g, o.replica, o.microbatch),
                                       static_cast<int>(ids.size()));
    share_group_[x] = it->second;
  }
}

void Deriver::CheckShareGroups(const std::function<bool(ValueId)>& walked) {
  if (share_members_.empty()) return;
  for (const std::vector<ValueId>& members : share_members_) {
    bool all = true;
    for (ValueId v : members) all = all && walked(v);
    if (!all) continue;
    // One contribution per distinct part; the parts together are the whole.
    std::vector<std::pair<ir::ValuePart, ValueId>> parts;
    std::vector<ContribId> held;
    bool known = true;
    for (ValueId v : members) {
      auto it = share_held_.find(v);
      if (it == share_held_.end() || it->second.contrib == kBadContrib) {
        known = false;  // reported where it went wrong
        break;
      }
      const ir::ValuePart& part = plan_.values[v].sub.part;
      bool seen = false;
      for (const auto& [p, w] : parts) {
        if (!(p == part)) continue;
        seen = true;
        if (share_held_[w].contrib != it->second.contrib) {
          Fail(FailureClass::kWrongClaim, absl::StrCat("value ", v), {plan_.values[v].device},
               plan_.values[v].microbatch, v, "",
               absl::StrCat("values ", w, " and ", v, " claim the same share ", part.ToString(),
                            " but hold ", contribs_.Describe(share_held_[w].contrib), " and ",
                            contribs_.Describe(it->second.contrib)),
               absl::StrCat("value ", w, ": ", contribs_.Example(share_held_[w].contrib),
                            "; value ", v, ": ", contribs_.Example(it->second.contrib)));
          known = false;
        }
      }
      if (!seen) {
        parts.emplace_back(part, v);
        held.push_back(it->second.contrib);
      }
    }
    if (!known) continue;
    const ValueId place = members[0];
    const ir::PlanValue& pv = plan_.values[place];
    std::vector<int64_t> devices;
    for (ValueId v : members) devices.push_back(plan_.values[v].device);
    const std::string item = absl::StrCat("shares of '", TensorName(pv.sub.tensor), "' ",
                                          ir::BoxToString(pv.sub.box));
    ContribStore::SumResult r = contribs_.Sum(held, ir::ReduceOp::kSum);
    if (!r.ok) {
      Fail(r.cls, item, devices, pv.microbatch, place, "",
           absl::StrCat("the values claiming shares of '", TensorName(pv.sub.tensor), "' ",
                        r.message),
           std::move(r.counterexample));
    } else if (r.id != kFullContrib) {
      Fail(contribs_.HoldsPartialSum(r.id) ? FailureClass::kMissingReduction
                                           : FailureClass::kMissingPiece,
           item, devices, pv.microbatch, place, "",
           absl::StrCat("the values claiming the shares of '", TensorName(pv.sub.tensor), "' ",
                        ir::BoxToString(pv.sub.box), " add up to ", contribs_.Describe(r.id),
                        ", not the complete value"),
           contribs_.Example(r.id));
    }
  }
}

std::vector<char> Deriver::DeriveStageClasses() {
  const int64_t nitems =
      static_cast<int64_t>(plan_.tasks.size() + plan_.collectives.size()) +
      (sliced_ == nullptr ? 0 : static_cast<int64_t>(sliced_->phantoms.size()));
  std::vector<char> active(nitems, 1);
  StageOptions stage_options;
  stage_options.sliced = sliced_;
  if (fast_.fold != nullptr) {
    ShareGroupsFromUnit();
    stage_options.share_group = &share_group_;
  } else if (fast_.shares) {
    stage_options.find_shares = true;
  }
  StagePartition parts = PartitionStages(spec_, plan_, stage_options);
  if (stage_options.find_shares) share_group_ = std::move(parts.share_group);
  if (!share_group_.empty()) {
    for (ValueId v = 0; v < static_cast<ValueId>(share_group_.size()); ++v) {
      const int g = share_group_[v];
      if (g < 0) continue;
      if (g >= static_cast<int>(share_members_.size())) share_members_.resize(g + 1);
      share_members_[g].push_back(v);
    }
  }
  out_.stages = static_cast<int64_t>(parts.stages.size());
  out_.distinct_stages = static_cast<int64_t>(parts.classes.size());
  // Layers whose unit stage stands for folded ones: derived on their own.
  absl::flat_hash_set<int> rep_layers;
  if (fast_.fold != nullptr) {
    for (int r : fast_.fold->reps) rep_layers.insert(fast_.fold->unit.stages[r].layer);
    // The slice's values that left-out stages compute, by their representative's layer.
    for (ValueId x = 0; x < static_cast<ValueId>(plan_.values.size()); ++x) {
      const int m = fast_.fold->value_member[sliced_->origin[x].unit];
      if (m < 0) continue;
      const int rep = fast_.fold->members[m].rep;
      folded_values_[fast_.fold->unit.stages[rep].layer].push_back(x);
    }
    const int64_t members = static_cast<int64_t>(fast_.fold->members.size());
    out_.stages += members;
    out_.stages_reused += members;
  }
  int64_t reps_found = 0;
  for (const std::vector<int>& cls : parts.classes) {
    int reps_in = 0;
    for (int s : cls) reps_in += rep_layers.contains(parts.stages[s].layer) ? 1 : 0;
    if (cls.size() < 2 && reps_in == 0) continue;
    const Stage& first = parts.stages[cls[0]];
    const size_t failures = out_.failures.size();
    const size_t undecided = out_.undecided.size();
    const std::map<std::string, LawUse> laws = laws_;
    bool alike = Walk(first.items, /*isolated=*/true).ok() && out_.failures.size() == failures &&
                 out_.undecided.size() == undecided;
    std::vector<Fact> first_facts;
    if (alike) {
      first_facts.reserve(first.values.size());
      for (ValueId v : first.values) first_facts.push_back(facts_[v]);
      for (size_t k = 0; alike && k < cls.size(); ++k) {
        alike = PresetAlike(first, first_facts, parts.stages[cls[k]]);
      }
    }
    for (size_t k = 0; alike && k < cls.size(); ++k) {
      const Stage& s = parts.stages[cls[k]];
      if (!rep_layers.contains(s.layer)) continue;
      alike = PresetFolded(first, first_facts, s);
      ++reps_found;
    }
    if (!alike) {
      if (reps_in > 0) {
        fast_failed_ = true;
        return active;
      }
      // Walked in place instead, where every failure is reported where it is.
      out_.failures.resize(failures);
      out_.undecided.resize(undecided);
      laws_ = laws;
      for (int s : cls) {
        for (ValueId v : parts.stages[s].boundary_outputs) preset_.erase(v);
      }
      continue;
    }
    for (int s : cls) {
      for (int64_t i : parts.stages[s].items) active[i] = 0;
    }
    out_.stages_reused += static_cast<int64_t>(cls.size()) - 1;
  }
  // A representative the slice does not cut cannot stand for its folded layers.
  if (reps_found != static_cast<int64_t>(rep_layers.size())) fast_failed_ = true;
  return active;
}

absl::StatusOr<Derivation> Deriver::Run() {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<char> active = DeriveStageClasses();
  const auto classes = std::chrono::steady_clock::now();
  out_.times.classes = std::chrono::duration<double>(classes - start).count();
  if (fast_failed_) return std::move(out_);
  std::vector<int64_t> items;
  for (int64_t i = 0; i < static_cast<int64_t>(active.size()); ++i) {
    if (active[i] != 0) items.push_back(i);
  }
  LOOM_RETURN_IF_ERROR(Walk(items, /*isolated=*/false, &active));
  out_.times.walk =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - classes).count();
  out_.items = static_cast<int64_t>(plan_.tasks.size() + plan_.collectives.size()) +
               (sliced_ == nullptr ? 0 : static_cast<int64_t>(sliced_->phantoms.size()));
  out_.values = static_cast<int64_t>(plan_.values.size());
  for (auto& [key, law] : laws_) out_.laws.push_back(std::move(law));
  return std::move(out_);
}

absl::Status Deriver::Walk(const std::vector<int64_t>& items, bool isolated,
                           const std::vector<char>* active) {
  const int64_t nv = static_cast<int64_t>(plan_.values.size());
  if (!isolated || static_cast<int64_t>(facts_.size()) != nv) facts_.assign(nv, Fact{});
  const int64_t nt = static_cast<int64_t>(plan_.tasks.size());
  const int64_t nc = static_cast<int64_t>(plan_.collectives.size());
  const int64_t np = sliced_ == nullptr ? 0 : static_cast<int64_t>(sliced_->phantoms.size());
  const int64_t nitems = nt + nc + np;
  // Phantom p reads its sources and writes its value.
  ValueId scratch[2];
  auto inputs_of = [&](int64_t item) -> absl::Span<const ValueId> {
    if (item < nt) return plan_.tasks[item].inputs;
    if (item < nt + nc) return plan_.collectives[item - nt].inputs;
    const Phantom& ph = sliced_->phantoms[item - nt - nc];
    scratch[0] = ph.src0;
    scratch[1] = ph.src1;
    return absl::Span<const ValueId>(scratch, ph.src1 != ir::kNoId ? 2 : 1);
  };
  auto outputs_of = [&](int64_t item) -> absl::Span<const ValueId> {
    if (item < nt) return plan_.tasks[item].outputs;
    if (item < nt + nc) return plan_.collectives[item - nt].outputs;
    return absl::Span<const ValueId>(&sliced_->phantoms[item - nt - nc].value, 1);
  };
  // Values by local index: every value for the whole plan, those the items
  // touch for a stage on its own.
  absl::flat_hash_map<ValueId, int32_t> index;
  std::vector<ValueId> vals;
  if (!isolated) {
    vals.resize(nv);
    for (ValueId v = 0; v < nv; ++v) vals[v] = v;
  }
  auto local = [&](ValueId v) -> int32_t {
    if (!isolated) return v;
    auto [it, fresh] = index.try_emplace(v, static_cast<int32_t>(vals.size()));
    if (fresh) vals.push_back(v);
    return it->second;
  };
  // 1: computed by a walked item, 2: only by one not walked.
  std::vector<char> produced(isolated ? 0 : nv, 0);
  if (!isolated) {
    for (int64_t i = 0; i < nitems; ++i) {
      if (active != nullptr && (*active)[i] == 0) {
        for (ValueId v : outputs_of(i)) produced[v] = 2;
      }
    }
  }
  // Readers of each value (items by their position in `items`), as offsets.
  std::vector<int32_t> pending(items.size(), 0);
  std::vector<int32_t> count;
  for (size_t k = 0; k < items.size(); ++k) {
    for (ValueId v : outputs_of(items[k])) {
      const int32_t l = local(v);
      if (static_cast<size_t>(l) >= produced.size()) produced.resize(vals.size(), 0);
      produced[l] = 1;
    }
    for (ValueId v : inputs_of(items[k])) {
      const int32_t l = local(v);
      if (static_cast<size_t>(l) >= count.size()) count.resize(vals.size(), 0);
      ++count[l];
      ++pending[k];
    }
  }
  const size_t nl = vals.size();
  count.resize(nl, 0);
  produced.resize(nl, 0);
  std::vector<int32_t> first(nl + 1, 0);
  for (size_t l = 0; l < nl; ++l) first[l + 1] = first[l] + count[l];
  std::vector<int32_t> readers(first[nl]);
  for (size_t k = 0; k < items.size(); ++k) {
    for (ValueId v : inputs_of(items[k])) {
      const int32_t l = local(v);
      readers[first[l] + --count[l]] = static_cast<int32_t>(k);
    }
  }
  std::vector<int32_t> ready;
  for (size_t k = 0; k < items.size(); ++k) {
    if (pending[k] == 0) ready.push_back(static_cast<int32_t>(k));
  }
  auto publish = [&](int32_t l) {
    for (int32_t r = first[l]; r < first[l + 1]; ++r) {
      if (--pending[readers[r]] == 0) ready.push_back(readers[r]);
    }
  };
  for (size_t l = 0; l < nl; ++l) {
    if (produced[l] == 1) continue;
    const ValueId v = vals[l];
    if (isolated) {
      // A stage on its own reads its inputs as claimed.
      if (first[l] == first[l + 1]) continue;
      facts_[v] = FromClaim(v);
    } else if (produced[l] == 2) {
      auto it = preset_.find(v);
      facts_[v] = it != preset_.end() ? it->second : FromClaim(v);
    } else if (auto it = preset_.find(v); it != preset_.end()) {
      facts_[v] = it->second;  // computed by a folded layer (verify/fold.h)
    } else if (!preset_claim_.empty() && preset_claim_[v] != 0) {
      facts_[v] = FromClaim(v);  // computed by a folded layer, holding its claim
    } else {
      DeriveLeaf(v);
    }
    publish(static_cast<int32_t>(l));
  }
  // Lowest item id first among the ready ones keeps reports in plan order
  // (`items` is ascending).
  std::make_heap(ready.begin(), ready.end(), std::greater<>());
  int64_t done = 0;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), std::greater<>());
    const int64_t item = items[ready.back()];
    ready.pop_back();
    position_ = done++;
    if (item < nt) {
      DeriveTask(plan_.tasks[item]);
    } else if (item < nt + nc) {
      DeriveCollective(plan_.collectives[item - nt]);
    } else {
      DerivePhantom(sliced_->phantoms[item - nt - nc]);
    }
    for (ValueId v : outputs_of(item)) {
      const int32_t l = local(v);
      for (int32_t r = first[l]; r < first[l + 1]; ++r) {
        if (--pending[readers[r]] == 0) {
          ready.push_back(readers[r]);
          std::push_heap(ready.begin(), ready.end(), std::greater<>());
        }
      }
    }
  }
  if (done != static_cast<int64_t>(items.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: ", static_cast<int64_t>(items.size()) - done,
        " tasks and collectives are on a dependency cycle"));
  }
  position_ = done;
  // Checks of what this walk computed.
  const std::function<bool(ValueId)> walked = [&](ValueId v) {
    if (!isolated) return produced[v] == 1;
    auto it = index.find(v);
    return it != index.end() && produced[it->second] == 1;
  };
  CheckShareGroups(walked);
  CheckReplicas(isolated ? &walked : nullptr);
  if (!isolated) CheckCoverage();
  return absl::OkStatus();
}

void Deriver::AsEvenShares(ir::OpKind kind, const OpTypes& types, std::vector<Fact>& in,
                           std::vector<ir::Rational>& factor, const std::vector<char>& zero) {
  // Each operand's members (homogeneity.h): the first share's part decides which
  // member; a share of another part counts as neither.
  std::vector<int64_t> members(in.size(), -1);
  std::optional<ir::ValuePart> part;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].contrib == kFullContrib) {
      members[i] = 0;
      continue;
    }
    std::optional<ContribStore::MemberPart> m = contribs_.MemberPartOf(in[i].contrib);
    if (!m.has_value() || (part.has_value() && *part != m->part)) continue;
    part = m->part;
    members[i] = m->members;
  }
  if (!part.has_value()) return;
  const EvenShares even = EvenShareFactors(kind, types.in, types.out, factor, zero, members);
  for (size_t i = 0; i < in.size(); ++i) {
    if (!even.even[i]) continue;
    in[i].contrib = contribs_.EvenShare(in[i].tensor, in[i].box, *part, TensorName(in[i].tensor));
    factor[i] = even.factor[i];
  }
}

}  // namespace loom::verify::derivation
