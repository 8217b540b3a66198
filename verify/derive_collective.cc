// Deriver: collectives.

#include "verify/derive_internal.h"

namespace loom::verify::derivation {

void Deriver::DeriveCollective(const ir::Collective& c) {
  const std::string item = CollName(c);
  const int mb = c.microbatch;
  const std::vector<int64_t>& devs = c.devices;
  const ValueId place = c.outputs.empty() ? ir::kNoId : c.outputs[0];
  if (!MicrobatchInvariantInputs(c.inputs, mb, item, c.outputs)) return;
  if (AnyBad(c.inputs)) {
    for (ValueId v : c.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
    return;
  }
  std::vector<Fact> in;
  for (ValueId v : c.inputs) in.push_back(facts_[v]);
  const int n = static_cast<int>(c.devices.size());
  std::vector<std::string> names;
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    names.push_back(absl::StrCat(ir::CollectiveKindName(c.kind), " member ", i, " (device ",
                                 i < n ? c.devices[i] : -1, ")"));
  }
  auto fail_outputs = [&]() { OutputsFromClaims(c.outputs); };
  if (c.kind == ir::CollectiveKind::kAllReduce && sliced_ != nullptr && sliced_->elided[c.id] > 0) {
    return DeriveReplicaSum(c, in);
  }
  // The collective's meaning is defined over inputs of equal dims: every member
  // it reads brings a region of input 0's size.
  const std::vector<int64_t> dims = ir::BoxDims(in[0].box);
  absl::StatusOr<ir::CollectiveMeaning> meaning = ir::MeaningOf(c, dims);
  if (!meaning.ok()) {
    Fail(FailureClass::kWrongShard, item, devs, mb, place, "",
         absl::StrCat(ir::CollectiveKindName(c.kind), " over ", ir::BoxToString(in[0].box), ": ",
                      meaning.status().message()),
         absl::StrCat(ir::BoxToString(in[0].box), " of '", TensorName(in[0].tensor),
                      "': ", meaning.status().message()));
    return fail_outputs();
  }
  for (const ir::CollectiveMove& m : meaning->moves) {
    const int j = m.source;
    if (j >= static_cast<int>(in.size())) {
      Undecide(item, absl::StrCat("reads member ", j, " of ", in.size()));
      return fail_outputs();
    }
    if (ir::BoxDims(in[j].box) != dims) {
      Fail(FailureClass::kWrongGroup, item, devs, mb, place, "",
           absl::StrCat(names[j], " holds ", ir::BoxToString(in[j].box), ", ", names[0],
                        " holds ", ir::BoxToString(in[0].box), " (regions of different sizes)"),
           RegionExample(TensorName(in[j].tensor), in[j].box, in[0].box,
                         absl::StrCat(names[j], " brings"), absl::StrCat(names[0], " brings")));
      return fail_outputs();
    }
  }
  // Region `from` of a member's input, in the logical coordinates of what it holds.
  auto window = [&](const Fact& f, const Box& from) {
    Fact w = f;
    for (size_t d = 0; d < from.size(); ++d) {
      w.box[d] = Interval{f.box[d].begin + from[d].begin, f.box[d].begin + from[d].end};
    }
    return w;
  };
  std::vector<std::vector<const ir::CollectiveMove*>> into(meaning->outputs);
  for (const ir::CollectiveMove& m : meaning->moves) into[m.target].push_back(&m);
  // A reducing collective reads one region of every member for each output
  // (all of it, or its chunk): the members are combined once, over the whole
  // input, and each output is its region of the result (elementwise reduction
  // commutes with taking a region).
  std::optional<Fact> combined;
  OutputRule rule = kCollectiveRule;
  if (meaning->reduce.has_value()) {
    combined = Combine(in, *meaning->reduce, item, devs, mb, place, &rule.zero_member);
    if (!combined || !CheckSharesMeet(c.inputs, c.outputs, *combined, item, devs, mb)) {
      return fail_outputs();
    }
    // An average: the sum times 1/n.
    combined->contrib = contribs_.Scaled(combined->contrib, meaning->scale);
    // A result whose factor no output claims: one failure for the collective.
    const ContribStore::Unscaled held = contribs_.Unscale(combined->contrib);
    const ir::Rational claimed = plan_.values[c.outputs[0]].sub.scale;
    bool alike = true;
    for (ValueId v : c.outputs) alike &= plan_.values[v].sub.scale == claimed;
    if (alike && held.base != kZeroContrib && held.factor != claimed) {
      const std::optional<ir::Rational> by = ir::Divide(held.factor, claimed);
      const std::string name = TensorName(combined->tensor);
      Fail(FailureClass::kScaled, item, devs, mb, place, "",
           absl::StrCat("its result holds ", contribs_.Describe(combined->contrib), " of '", name,
                        "' ", ir::BoxToString(combined->box), " where its outputs claim ",
                        claimed.IsOne() ? std::string("no factor")
                                        : absl::StrCat("a factor of ", claimed.ToString()),
                        " (scaled by ", by.has_value() ? by->ToString() : "?", ")"),
           absl::StrCat("'", name, "': ", contribs_.Example(combined->contrib),
                        "; its outputs claim ", claimed.ToString(), " times their piece"));
      return fail_outputs();
    }
  }
  // Outputs whose moves read the same regions of the same members hold the same
  // (an all-reduce's, an all-gather's, a broadcast's): derived once.
  std::optional<Fact> previous;
  for (int i = 0; i < meaning->outputs && i < static_cast<int>(c.outputs.size()); ++i) {
    const std::vector<const ir::CollectiveMove*>& moves = into[i];
    const bool same_as_previous =
        i > 0 && previous.has_value() && moves.size() == into[i - 1].size() &&
        std::equal(moves.begin(), moves.end(), into[i - 1].begin(),
                   [](const ir::CollectiveMove* x, const ir::CollectiveMove* y) {
                     return x->source == y->source && x->from == y->from && x->to == y->to;
                   });
    if (!same_as_previous) {
      previous.reset();
      if (combined.has_value()) {
        previous = window(*combined, moves[0]->from);
      } else if (moves.size() == 1) {
        previous = window(in[moves[0]->source], moves[0]->from);
      } else {
        // The moves tile the output along one dim, in member order.
        int join = -1;
        for (size_t d = 0; d < moves[0]->to.size() && join < 0; ++d) {
          if (!(moves[0]->to[d] == moves[1]->to[d])) join = static_cast<int>(d);
        }
        std::vector<Fact> parts;
        std::vector<std::string> part_names;
        for (const ir::CollectiveMove* m : moves) {
          parts.push_back(window(in[m->source], m->from));
          part_names.push_back(names[m->source]);
        }
        bool claims_full = true;
        for (ValueId v : c.outputs) claims_full &= plan_.values[v].sub.part.IsFull();
        previous = Gather(parts, join, part_names, claims_full, item, devs, mb, place);
        if (!previous) return fail_outputs();
      }
    }
    SetOutput(c.outputs[i], *previous, item, mb, "",
              combined.has_value() ? rule : kCollectiveRule);
  }
}

void Deriver::DeriveReplicaSum(const ir::Collective& c, const std::vector<Fact>& in) {
  const int64_t dp = sliced_->elided[c.id];
  const size_t slots = sliced_->replicas.size();
  if (c.reduce == ir::ReduceOp::kAvg) {  // factored plans average by claims, not collectives
    fast_failed_ = true;
    for (ValueId v : c.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
    return;
  }
  const std::string item = CollName(c);
  const ValueId place = c.outputs.empty() ? ir::kNoId : c.outputs[0];
  auto give_up = [&] {
    fast_failed_ = true;
    for (ValueId v : c.outputs) facts_[v] = FromClaim(v), facts_[v].contrib = kBadContrib;
  };
  // Each unit member's dp replicas: slots 0 and 1 extrapolate to all of them
  // (the last slot is checked to agree, CheckReplicas).
  std::vector<Fact> sums;
  for (size_t i = 0; i * slots + 1 < in.size(); i += 1) {
    const Fact& a = in[i * slots];
    const Fact& b = in[i * slots + 1];
    if (a.tensor != b.tensor || !(a.box == b.box)) return give_up();
    auto p = contribs_.ProgressionSum(a.contrib, b.contrib, dp);
    if (!p.has_value()) return give_up();
    Fact f = a;
    f.contrib = *p;
    sums.push_back(std::move(f));
  }
  OutputRule rule = kCollectiveRule;
  auto sum = Combine(sums, c.reduce, item, c.devices, c.microbatch, place, &rule.zero_member);
  if (!sum) return OutputsFromClaims(c.outputs);
  for (ValueId v : c.outputs) SetOutput(v, *sum, item, c.microbatch, "", rule);
}

}  // namespace loom::verify::derivation
