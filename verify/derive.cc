#include "verify/derive.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/collective_semantics.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "verify/contrib.h"
#include "verify/law_reduce.h"
#include "verify/counterexample.h"
#include "verify/factored.h"
#include "verify/fold.h"
#include "verify/homogeneity.h"
#include "verify/stages.h"
#include "verify/derive_internal.h"

namespace loom::verify {

namespace derivation {

void Deriver::SetOutput(ValueId v, Fact derived, const std::string& item, int microbatch,
                        const std::string& first_op, OutputRule rule) {
  const ir::PlanValue& pv = plan_.values[v];
  const ir::SubTensor& claim = pv.sub;
  std::vector<int64_t> devices = {pv.device};
  if (derived.contrib == kBadContrib) {
    facts_[v] = derived;
    return;
  }
  const std::string name = TensorName(claim.tensor);
  if (derived.tensor != claim.tensor) {
    Fail(rule.wrong_tensor, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims a piece of '", name, "' but holds a piece of '",
                      TensorName(derived.tensor), "'"),
         TensorExample(TensorName(derived.tensor), name));
    facts_[v] = FromClaim(v);
    return;
  }
  if (!(derived.box == claim.box)) {
    Fail(rule.wrong_box, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims region ", ir::BoxToString(claim.box), " of '", name,
                      "' but holds region ", ir::BoxToString(derived.box)),
         RegionExample(name, derived.box, claim.box));
    facts_[v] = FromClaim(v);
    return;
  }
  // The factor it holds its piece by against the claim's (a zero has none).
  const ContribStore::Unscaled held = contribs_.Unscale(derived.contrib);
  if (held.base != kZeroContrib && held.factor != claim.scale) {
    const std::optional<ir::Rational> by = ir::Divide(held.factor, claim.scale);
    const std::string factor = by.has_value() ? by->ToString() : "an unrepresentable factor";
    Fail(FailureClass::kScaled, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " of '", name, "' ", ir::BoxToString(claim.box), " holds ",
                      contribs_.Describe(derived.contrib), " where its claim says ",
                      claim.scale.IsOne() ? std::string("no factor")
                                          : absl::StrCat("a factor of ", claim.scale.ToString()),
                      " (scaled by ", factor, ")"),
         absl::StrCat("value ", v, " of '", name, "': ", contribs_.Example(derived.contrib),
                      "; its claim says ", claim.scale.ToString(), " times its piece"));
    facts_[v] = FromClaim(v);
    return;
  }
  const Contrib& c = contribs_.get(held.base);
  if (claim.part.IsFull() && c.kind != Contrib::kFull) {
    const FailureClass cls = !contribs_.HoldsPartialSum(derived.contrib) || rule.zero_member
                                 ? FailureClass::kMissingPiece
                                 : FailureClass::kMissingReduction;
    Fail(cls, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims the complete value of '", name, "' ",
                      ir::BoxToString(claim.box), " but holds ", contribs_.Describe(derived.contrib)),
         absl::StrCat("value ", v, " of '", name, "': ", contribs_.Example(derived.contrib)));
    facts_[v] = FromClaim(v);
    return;
  }
  if (claim.part.IsEmpty() && c.kind != Contrib::kZero) {
    Fail(FailureClass::kWrongClaim, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims zeros of '", name, "' but holds ",
                      contribs_.Describe(derived.contrib)),
         absl::StrCat("value ", v, " of '", name, "': ", contribs_.Example(derived.contrib),
                      "; its claim says 0"));
    facts_[v] = FromClaim(v);
    return;
  }
  // A share claim on a complete value or on zeros is a zero-split (one member
  // keeps the value, the others hold zeros); sums check that it is counted once.
  if (IsShare(v)) {
    // Readers see the opaque share; its group is checked where it is produced.
    share_held_[v] = std::move(derived);
    facts_[v] = FromClaim(v);
    return;
  }
  facts_[v] = std::move(derived);
}

void Deriver::DeriveLeaf(ValueId v) {
  const ir::PlanValue& pv = plan_.values[v];
  const TensorId t = pv.sub.tensor;
  facts_[v] = FromClaim(v);
  const std::string item = absl::StrCat("value ", v, " (plan input)");
  if (spec_.tensor(t).producer != ir::kNoId) {
    Fail(FailureClass::kMissingPiece, item, {pv.device}, pv.microbatch, v, "",
         absl::StrCat("value ", v, " on device ", pv.device, " claims computed tensor '",
                      spec_.tensor(t).name, "' but nothing in the plan computes it"),
         absl::StrCat("with the loaded buffer holding 0 and the spec's '", spec_.tensor(t).name,
                      "' equal to 1: the plan reads 0 where the spec reads 1"));
    facts_[v].contrib = kBadContrib;
    return;
  }
  if (facts_[v].contrib == kBadContrib) {
    Fail(FailureClass::kWrongClaim, item, {pv.device}, pv.microbatch, v, "",
         absl::StrCat("plan input value ", v, " claims share ", pv.sub.part.ToString(),
                      " of input tensor '", spec_.tensor(t).name,
                      "'; inputs are loaded whole or as zeros"),
         absl::StrCat("with '", spec_.tensor(t).name, "' equal to 1: the loader puts 1 on device ",
                      pv.device, " where its claim says a ", pv.sub.part.ToString(),
                      " share of a sum equal to 1"));
  }
}

void Deriver::DeriveTask(const ir::Task& t) {
  if (!MicrobatchInvariantInputs(t.inputs, t.info.microbatch, TaskName(t), t.outputs)) return;
  if (AnyBad(t.inputs)) {
    for (ValueId v : t.outputs) {
      facts_[v] = FromClaim(v);
      facts_[v].contrib = kBadContrib;
    }
    return;
  }
  if (t.op == ir::kNoId) {
    DeriveLocal(t);
  } else {
    DeriveCompute(t);
  }
}

void Deriver::DeriveLocal(const ir::Task& t) {
  const std::string item = TaskName(t);
  const int mb = t.info.microbatch;
  const int64_t dev = t.device;
  switch (t.kind) {
    case OpKind::kSlice: {
      const Fact& in = facts_[t.inputs[0]];
      auto dim = t.attrs.GetInt("dim");
      auto begin = t.attrs.GetInt("begin");
      auto end = t.attrs.GetInt("end");
      if (!dim.ok() || !begin.ok() || !end.ok() || *dim < 0 ||
          *dim >= static_cast<int64_t>(in.box.size())) {
        Undecide(item, "slice without valid dim/begin/end attributes");
        OutputsFromClaims(t.outputs);
        facts_[t.outputs[0]].contrib = kBadContrib;
        return;
      }
      Fact out = in;
      const Interval iv = in.box[*dim];
      out.box[*dim] = Interval{iv.begin + *begin, iv.begin + *end};
      if (*begin < 0 || *end > iv.size() || *begin > *end) {
        Fail(FailureClass::kWrongShard, item, {dev}, mb, t.outputs[0], "",
             absl::StrCat("slice [", *begin, ":", *end, ") of dim ", *dim,
                          " lies outside the input's ", iv.size(), " elements"),
             absl::StrCat("with '", TensorName(in.tensor), "'[..] = i along dim ", *dim,
                          ": the input holds i = ", iv.begin, "..", iv.end - 1,
                          " and the slice asks for positions ", *begin, "..", *end - 1,
                          " of it"));
        OutputsFromClaims(t.outputs);
        return;
      }
      if (std::optional<Fact> piece = AsSplitPiece(out, plan_.values[t.outputs[0]].sub.tensor,
                                                   *dim)) {
        out = *std::move(piece);
      }
      SetOutput(t.outputs[0], out, item, mb, "", kTaskRule);
      return;
    }
    case OpKind::kConcat: {
      auto dim = t.attrs.GetInt("dim");
      std::vector<Fact> in;
      std::vector<std::string> names;
      for (size_t i = 0; i < t.inputs.size(); ++i) {
        in.push_back(facts_[t.inputs[i]]);
        names.push_back(absl::StrCat("concat operand ", i));
      }
      if (!dim.ok() || t.outputs.size() != 1 || in.empty() || *dim < 0 ||
          *dim >= static_cast<int64_t>(in[0].box.size())) {
        Undecide(item, "concat without a valid dim");
        OutputsFromClaims(t.outputs);
        facts_[t.outputs[0]].contrib = kBadContrib;
        return;
      }
      if (std::optional<Fact> region = AsConcatRegion(in, *dim)) {
        SetOutput(t.outputs[0], *std::move(region), item, mb, "", kTaskRule);
        return;
      }
      auto joined = Gather(in, static_cast<int>(*dim), names,
                           plan_.values[t.outputs[0]].sub.part.IsFull(), item, {dev}, mb,
                           t.outputs[0]);
      if (!joined) {
        OutputsFromClaims(t.outputs);
        return;
      }
      SetOutput(t.outputs[0], *joined, item, mb, "", kTaskRule);
      return;
    }
    case OpKind::kFill: {
      auto value = t.attrs.GetFloat("value");
      const ValueId v = t.outputs[0];
      Fact out = FromClaim(v);
      out.contrib = kZeroContrib;
      if (!value.ok() || *value != 0.0) {
        const std::string written = value.ok() ? absl::StrCat(*value) : "anything";
        Fail(FailureClass::kComputationDiffers, item, {dev}, mb, v, "",
             absl::StrCat("fill with ", value.ok() ? absl::StrCat(*value) : "no value",
                          " stands for a share of '", spec_.tensor(out.tensor).name,
                          "'; only zero shares are exact"),
             absl::StrCat("with '", spec_.tensor(out.tensor).name, "' equal to 0: the fill holds ",
                          written, " where its share must be 0"));
        OutputsFromClaims(t.outputs);
        return;
      }
      SetOutput(v, out, item, mb, "", kTaskRule);
      return;
    }
    case OpKind::kScale: {
      // A program's own scaling of a value (a gradient divided by the world size):
      // the value times the factor, read exactly (the double's simplest rational).
      auto factor = t.attrs.GetFloat("factor");
      const std::optional<ir::Rational> k =
          factor.ok() ? ir::RationalOfDouble(*factor) : std::nullopt;
      if (!k.has_value() || k->num == 0 || t.inputs.size() != 1 || t.outputs.size() != 1) {
        Undecide(item, factor.ok() ? absl::StrCat("scale by ", *factor,
                                                  ", which has no exact rational form")
                                   : "scale without a factor");
        OutputsFromClaims(t.outputs);
        facts_[t.outputs[0]].contrib = kBadContrib;
        return;
      }
      Fact out = facts_[t.inputs[0]];
      out.contrib = contribs_.Scaled(out.contrib, *k);
      SetOutput(t.outputs[0], out, item, mb, "", kTaskRule);
      return;
    }
    case OpKind::kAccumulate: {
      std::vector<Fact> in;
      for (ValueId v : t.inputs) in.push_back(facts_[v]);
      bool zero_member = false;
      auto sum = Combine(in, ir::ReduceOp::kSum, item, {dev}, mb, t.outputs[0], &zero_member);
      if (!sum || !CheckSharesMeet(t.inputs, t.outputs, *sum, item, {dev}, mb)) {
        OutputsFromClaims(t.outputs);
        return;
      }
      OutputRule rule = kTaskRule;
      rule.zero_member = zero_member;
      SetOutput(t.outputs[0], *sum, item, mb, "", rule);
      return;
    }
    case OpKind::kAttentionMerge:
      DeriveMerge(t);
      return;
    default:
      Undecide(item, absl::StrCat("local '", ir::OpKindName(t.kind),
                                  "' without a logical op has no derivation rule"));
      for (ValueId v : t.outputs) {
        facts_[v] = FromClaim(v);
        facts_[v].contrib = kBadContrib;
      }
  }
}

std::optional<Fact> Deriver::AsSplitPiece(const Fact& sliced, TensorId claimed,
                                          int64_t dim) const {
  if (claimed == sliced.tensor || claimed == ir::kNoId) return std::nullopt;
  const ir::Tensor& tensor = spec_.tensor(claimed);
  if (tensor.producer == ir::kNoId) return std::nullopt;
  const ir::Op& split = spec_.op(tensor.producer);
  if (split.kind != OpKind::kSplit || split.inputs.size() != 1 ||
      split.inputs[0] != sliced.tensor) {
    return std::nullopt;
  }
  auto split_dim = split.attrs.GetInt("dim");
  auto sizes = split.attrs.GetInts("sizes");
  if (!split_dim.ok() || *split_dim != dim || !sizes.ok() || tensor.output_index < 0 ||
      tensor.output_index >= static_cast<int>(sizes->size())) {
    return std::nullopt;
  }
  // Only values holding the whole of their positions (or zeros) move: a partial
  // sum's chunks are of the op that made the split's input.
  const ContribId base = contribs_.Unscale(sliced.contrib).base;
  if (base != kFullContrib && base != kZeroContrib) return std::nullopt;
  int64_t start = 0;
  for (int k = 0; k < tensor.output_index; ++k) start += (*sizes)[k];
  const int64_t size = (*sizes)[tensor.output_index];
  const Interval iv = sliced.box[dim];
  if (iv.begin < start || iv.end > start + size) return std::nullopt;
  Fact out = sliced;
  out.tensor = claimed;
  out.box[dim] = Interval{iv.begin - start, iv.end - start};
  return out;
}

std::optional<Fact> Deriver::AsConcatRegion(const std::vector<Fact>& in, int64_t dim) const {
  if (in.empty()) return std::nullopt;
  for (const Fact& f : in) {
    if (!f.known || f.contrib != kFullContrib || f.tensor == ir::kNoId ||
        !(f.box == ir::FullBox(spec_.tensor(f.tensor).shape))) {
      return std::nullopt;
    }
  }
  for (ir::OpId id : spec_.consumers(in[0].tensor)) {
    const ir::Op& concat = spec_.op(id);
    auto concat_dim = concat.attrs.GetInt("dim");
    if (concat.kind != OpKind::kConcat || !concat_dim.ok() || *concat_dim != dim) continue;
    for (size_t first = 0; first + in.size() <= concat.inputs.size(); ++first) {
      bool consecutive = true;
      for (size_t k = 0; k < in.size() && consecutive; ++k) {
        consecutive = concat.inputs[first + k] == in[k].tensor;
      }
      if (!consecutive) continue;
      int64_t begin = 0;
      for (size_t k = 0; k < first; ++k) begin += spec_.tensor(concat.inputs[k]).shape.dim(dim);
      int64_t end = begin;
      for (const Fact& f : in) end += spec_.tensor(f.tensor).shape.dim(dim);
      Fact out;
      out.known = true;
      out.tensor = concat.outputs[0];
      out.box = ir::FullBox(spec_.tensor(out.tensor).shape);
      out.box[dim] = Interval{begin, end};
      out.contrib = kFullContrib;
      return out;
    }
  }
  return std::nullopt;
}

std::optional<Fact> Deriver::Combine(const std::vector<Fact>& facts, ir::ReduceOp reduce,
                                     const std::string& item,
                                     const std::vector<int64_t>& devices, int microbatch,
                                     ValueId place, bool* zero_member) {
  for (size_t i = 1; i < facts.size(); ++i) {
    if (facts[i].tensor != facts[0].tensor) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat("combines a piece of '", TensorName(facts[0].tensor),
                        "' with a piece of '", TensorName(facts[i].tensor), "'"),
           TensorExample(TensorName(facts[i].tensor), TensorName(facts[0].tensor),
                         absl::StrCat("member ", i, " adds"), "member 0 adds"));
      return std::nullopt;
    }
    if (!(facts[i].box == facts[0].box)) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat("combines region ", ir::BoxToString(facts[0].box), " with region ",
                        ir::BoxToString(facts[i].box), " of '", TensorName(facts[0].tensor),
                        "' (member ", i, ")"),
           RegionExample(TensorName(facts[0].tensor), facts[i].box, facts[0].box,
                         absl::StrCat("member ", i, " adds"), "member 0 adds"));
      return std::nullopt;
    }
  }
  std::vector<ContribId> ids;
  for (const Fact& f : facts) ids.push_back(f.contrib);
  if (zero_member != nullptr) {
    *zero_member = std::find(ids.begin(), ids.end(), kZeroContrib) != ids.end();
  }
  ContribStore::SumResult r = contribs_.Sum(ids, reduce);
  if (!r.ok) {
    Fail(r.cls, item, devices, microbatch, place, "",
         absl::StrCat(r.message, " of '", TensorName(facts[0].tensor), "' ",
                      ir::BoxToString(facts[0].box)),
         std::move(r.counterexample));
    return std::nullopt;
  }
  Fact out = facts[0];
  out.contrib = r.id;
  return out;
}

std::optional<ir::Rational> Measure(const ir::ValuePart& part) {
  int64_t num = 0, den = 1;
  for (const ir::ValuePart::Piece& p : part.pieces()) {
    const ir::Rational len = ir::Rational::Of(
        p.hi.num * p.lo.den - p.lo.num * p.hi.den, p.hi.den * p.lo.den);
    if (den > (int64_t{1} << 30) || len.den > (int64_t{1} << 30)) return std::nullopt;
    const ir::Rational next = ir::Rational::Of(num * len.den + len.num * den, den * len.den);
    num = next.num;
    den = next.den;
  }
  return ir::Rational::Of(num, den);
}

bool Deriver::CheckSharesMeet(const std::vector<ValueId>& inputs,
                              const std::vector<ValueId>& outputs, const Fact& sum,
                              const std::string& item, const std::vector<int64_t>& devices,
                              int microbatch) {
  if (inputs.empty()) return true;
  // Copies of complete values: their sum is a multiple of the value, which the
  // results' claims are checked against (a factor, not a share).
  if (std::all_of(inputs.begin(), inputs.end(),
                  [&](ValueId v) { return plan_.values[v].sub.part.IsFull(); })) {
    return true;
  }
  const std::string name = TensorName(plan_.values[inputs[0]].sub.tensor);
  ir::ValuePart together = ir::ValuePart::Empty();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::ValuePart& part = plan_.values[inputs[i]].sub.part;
    for (size_t j = 0; j < i; ++j) {
      const ir::ValuePart& earlier = plan_.values[inputs[j]].sub.part;
      if (part.Disjoint(earlier)) continue;
      Fail(FailureClass::kWrongClaim, item, devices, microbatch, inputs[i], "",
           absl::StrCat("value ", inputs[j], " claims share ", earlier.ToString(), " and value ",
                        inputs[i], " claims share ", part.ToString(), " of '", name,
                        "'; they meet in one sum, but their shares overlap"),
           absl::StrCat("with '", name, "' equal to 1 and every share holding its measure of "
                        "it: the sum of their claims exceeds what they add up to"));
      return false;
    }
    auto joined = together.Union(part);
    if (!joined.ok()) return true;  // unreachable: the shares were disjoint
    together = *std::move(joined);
  }
  const Contrib::Kind held = contribs_.get(sum.contrib).kind;
  const bool complete = held == Contrib::kFull;
  if (complete && !together.IsFull()) {
    Fail(FailureClass::kWrongClaim, item, devices, microbatch, inputs[0], "",
         absl::StrCat("the members sum to the complete value of '", name, "' but their shares make ",
                      together.ToString()),
         absl::StrCat("with '", name, "' equal to 1 and every share holding its measure of it: "
                      "the members' claims add up to ", together.ToString(), ", not 1"));
    return false;
  }
  for (ValueId v : outputs) {
    const ir::ValuePart& claim = plan_.values[v].sub.part;
    if (claim == together) continue;
    // A complete value claimed of a partial sum is a missing reduction or piece,
    // reported as such where the result is set.
    if (claim.IsFull() && !complete) continue;
    const bool zero_split = !claim.IsFull() && (complete || held == Contrib::kZero);
    if (zero_split) continue;
    // A partial sum may name its share anew (shares of a dp sum of tp shares
    // become one share of the whole), keeping its measure.
    const std::optional<ir::Rational> a = Measure(claim), b = Measure(together);
    if (!claim.IsFull() && !claim.IsEmpty() && a.has_value() && a == b) continue;
    Fail(FailureClass::kWrongClaim, item, devices, microbatch, v, "",
         absl::StrCat("value ", v, " claims ",
                      claim.IsFull() ? std::string("the complete value")
                                     : absl::StrCat("share ", claim.ToString()),
                      " of '", name, "' but sums shares that make ", together.ToString()),
         absl::StrCat("with '", name, "' equal to 1 and every share holding its measure of it: "
                      "the sum holds ", together.ToString(), " where its claim says ",
                      claim.ToString()));
    return false;
  }
  return true;
}

std::optional<Fact> Deriver::Gather(const std::vector<Fact>& in, int dim,
                                    const std::vector<std::string>& names, bool claims_full,
                                    const std::string& item, const std::vector<int64_t>& devices,
                                    int microbatch, ValueId place) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].tensor != in[0].tensor) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat(names[i], " holds a piece of '", TensorName(in[i].tensor), "', ",
                        names[0], " of '", TensorName(in[0].tensor), "'"),
           TensorExample(TensorName(in[i].tensor), TensorName(in[0].tensor),
                         absl::StrCat(names[i], " brings"), absl::StrCat(names[0], " brings")));
      return std::nullopt;
    }
  }
  Fact out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    Box expect = in[i - 1].box;
    expect[dim] = Interval{in[i - 1].box[dim].end, in[i - 1].box[dim].end + in[i].box[dim].size()};
    if (!(in[i].box == expect)) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat(names[i], " holds ", ir::BoxToString(in[i].box),
                        " but the gathered order needs ", ir::BoxToString(expect), " after ",
                        names[i - 1]),
           RegionExample(TensorName(in[i].tensor), in[i].box, expect,
                         absl::StrCat(names[i], " brings"), "the gathered order needs"));
      return std::nullopt;
    }
    out.box[dim].end = in[i].box[dim].end;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].contrib == in[0].contrib) continue;
    // Regions holding different contributions: the joined value is what each
    // member holds, region by region.
    size_t short_member = 0;
    while (short_member < in.size() && in[short_member].contrib == kFullContrib) ++short_member;
    const Fact& m = in[short_member];
    if (!claims_full) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat(names[i], " holds ", contribs_.Describe(in[i].contrib), ", ", names[0],
                        " holds ", contribs_.Describe(in[0].contrib)),
           absl::StrCat(names[i], ": ", contribs_.Example(in[i].contrib), "; ", names[0], ": ",
                        contribs_.Example(in[0].contrib)));
      return std::nullopt;
    }
    const FailureClass cls = contribs_.HoldsPartialSum(m.contrib) ? FailureClass::kMissingReduction
                                                                  : FailureClass::kMissingPiece;
    Fail(cls, item, devices, microbatch, place, "",
         absl::StrCat(names[short_member], " brings ", contribs_.Describe(m.contrib), " over ",
                      ir::BoxToString(m.box), ", so the joined value is not complete there"),
         absl::StrCat(names[short_member], " over ", ir::BoxToString(m.box), ": ",
                      contribs_.Example(m.contrib)));
    return std::nullopt;
  }
  return out;
}

}  // namespace derivation

using derivation::Deriver;
using derivation::FastPath;
using derivation::Fact;

namespace {

bool Clean(const Derivation& d) { return d.failures.empty() && d.undecided.empty(); }

class Clock {
 public:
  // Seconds since the last call (or since construction).
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace

namespace {

// What checking a plan and folding its alike layers give the derivation: the
// spec's micro-batch map, the fold, and whether the micro-batches are copies of
// one another (the fold is used only then).
struct CheckedPlan {
  absl::StatusOr<ir::MicrobatchMap> mbmap = absl::UnknownError("not built");
  std::optional<LayerFold> fold;
  bool symmetric = false;
};

// The values a folded plan's left-out stages name (compute or read): each has the
// claim, type and tensor type of the value in the same place of its
// representative, which is checked; those a representative names are not left out.
std::vector<char> LeftOutValues(const LayerFold& fold, size_t num_values) {
  std::vector<char> left_out(num_values, 0);
  for (const LayerFold::Member& m : fold.members) {
    for (ir::ValueId v : fold.unit.stages[m.stage].values) left_out[v] = 1;
  }
  for (int r : fold.reps) {
    for (ir::ValueId v : fold.unit.stages[r].values) left_out[v] = 0;
  }
  return left_out;
}

// A factored plan's alike layers are folded while the spec's micro-batch map is
// built and the plan's structure is checked on this thread; the fold cuts the
// stages before it needs the map. Then the plan's types are checked, except those
// of the items the fold leaves out: each has the kinds, attributes, claims and
// types of an item of its class's first stage (the stage encoding compares
// everything the type checks read), which is checked. The micro-batch symmetry
// the slice needs is checked copy by copy by both threads: this one once it has
// checked the structure and helped the fold encode the stages, the fold's once
// the fold is done.
absl::Status CheckAndFoldConcurrently(const ir::Graph& spec, const ir::Plan& plan, Clock& clock,
                                      Derivation::Times& times, CheckedPlan& checked) {
  std::promise<const ir::MicrobatchMap*> built;
  std::shared_future<const ir::MicrobatchMap*> map = built.get_future().share();
  EncodeHelp help;  // this thread, once its checks are done
  // The micro-batch copies still to check (the check is set before the map is
  // published, and read only after).
  std::unique_ptr<MicrobatchSymmetry> symmetry;
  std::atomic<int> next_copy{1};
  std::atomic<bool> copies_alike{true};
  auto check_copies = [&] {
    if (map.get() == nullptr || symmetry == nullptr || !symmetry->status().ok()) return;
    for (int m; copies_alike && (m = next_copy.fetch_add(1)) < symmetry->microbatches();) {
      if (!symmetry->CheckCopy(m).ok()) copies_alike = false;
    }
  };
  std::thread folder([&] {
    checked.fold = FoldLayers(
        spec, plan,
        [&]() -> const ir::MicrobatchMap* {
          const ir::MicrobatchMap* m = map.get();
          return m != nullptr && ir::ValidateFactoring(plan, *m).ok() ? m : nullptr;
        },
        &help);
    help.Close();
    check_copies();
  });
  // The spec's micro-batch map, built once for the checks and the slice.
  checked.mbmap = ir::MicrobatchMap::Build(spec);
  if (checked.mbmap.ok()) symmetry = std::make_unique<MicrobatchSymmetry>(spec, *checked.mbmap);
  built.set_value(checked.mbmap.ok() ? &*checked.mbmap : nullptr);
  absl::Status valid = checked.mbmap.ok()
                           ? ir::ValidatePlanStructure(spec, plan, *checked.mbmap)
                           : ir::ValidatePlan(spec, plan);
  if (valid.ok()) {
    help.Help();
    check_copies();
  }
  times.validate = clock.Lap();
  folder.join();
  times.fold = clock.Lap();
  checked.symmetric = valid.ok() && symmetry != nullptr && symmetry->status().ok() &&
                      copies_alike.load() && next_copy.load() >= symmetry->microbatches();
  if (valid.ok() && checked.mbmap.ok()) {
    ir::ImpliedTypes implied;
    std::vector<char> left_out_values;
    if (checked.fold.has_value() && checked.symmetric) {
      implied.tasks = &checked.fold->skip_tasks;
      implied.collectives = &checked.fold->skip_collectives;
      left_out_values = LeftOutValues(*checked.fold, plan.values.size());
      implied.values = &left_out_values;
    }
    valid = ir::ValidatePlanTypes(spec, plan, *checked.mbmap, implied);
    times.validate += clock.Lap();
  }
  return valid;
}

// The plan checked whole, then, for the fast derivation of a factored plan whose
// micro-batches are copies of one another, its alike layers folded.
absl::Status CheckAndFold(const ir::Graph& spec, const ir::Plan& plan,
                          const DeriveOptions& options, Clock& clock, Derivation::Times& times,
                          CheckedPlan& checked) {
  checked.mbmap = ir::MicrobatchMap::Build(spec);
  if (checked.mbmap.ok()) {
    LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan, *checked.mbmap));
  } else {
    LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
  }
  times.validate = clock.Lap();
  if (options.fast && plan.is_factored() && checked.mbmap.ok()) {
    checked.symmetric = CheckMicrobatchSymmetry(spec, *checked.mbmap).ok();
    if (checked.symmetric && ir::ValidateFactoring(plan, *checked.mbmap).ok() &&
        IdsInRange(spec, plan)) {
      checked.fold = FoldLayers(spec, plan, *checked.mbmap);
    }
    times.fold = clock.Lap();
  }
  return absl::OkStatus();
}

// The fast derivation of `plan` (a slice of a factored plan when `sliced` is set),
// or nullopt where the options ask for the plain one instead: when the fast one
// gave up or found something.
absl::StatusOr<std::optional<Derivation>> DeriveFast(const ir::Graph& spec,
                                                     const ir::Plan& plan,
                                                     const SlicedPlan* sliced,
                                                     const FastPath& fast_path,
                                                     const DeriveOptions& options) {
  Deriver fast(spec, plan, sliced, fast_path, options.on_law);
  LOOM_ASSIGN_OR_RETURN(Derivation d, fast.Run());
  if (options.plain && (fast.fast_failed() || !Clean(d))) return std::nullopt;
  if (fast.fast_failed()) d.undecided.push_back({"derivation", "the fast derivation gave up"});
  return d;
}

}  // namespace

absl::StatusOr<Derivation> DeriveLineage(const ir::Graph& spec, const ir::Plan& plan,
                                         const DeriveOptions& options) {
  Clock clock;
  Derivation::Times times;
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  // The fold of a factored plan's alike layers runs beside the plan's checks where
  // there is another thread. The fold is used only once the checks pass.
  CheckedPlan checked;
  if (options.fast && plan.is_factored() && threads >= 2) {
    LOOM_RETURN_IF_ERROR(CheckAndFoldConcurrently(spec, plan, clock, times, checked));
  } else {
    LOOM_RETURN_IF_ERROR(CheckAndFold(spec, plan, options, clock, times, checked));
  }
  if (!checked.symmetric) checked.fold.reset();
  auto finish = [&](absl::StatusOr<Derivation> d, bool plain) -> absl::StatusOr<Derivation> {
    if (d.ok()) {
      d->times.validate = times.validate;
      d->times.fold += times.fold;
      d->times.slice += times.slice;
      d->plain = plain;
    }
    return d;
  };
  FastPath shares;
  shares.shares = true;
  if (!plan.is_factored()) {
    if (options.fast) {
      LOOM_ASSIGN_OR_RETURN(std::optional<Derivation> d,
                            DeriveFast(spec, plan, nullptr, shares, options));
      if (d.has_value()) return finish(*std::move(d), false);
    }
    return finish(Deriver(spec, plan, nullptr, {}, options.on_law).Run(), true);
  }
  if (options.fast) {
    if (checked.fold.has_value()) {
      SliceOptions slice_options;
      slice_options.skip_tasks = &checked.fold->skip_tasks;
      slice_options.skip_collectives = &checked.fold->skip_collectives;
      slice_options.skip_outputs = &checked.fold->skip_outputs;
      slice_options.compress_replicas = true;
      const SlicedPlan sliced =
          SliceFactoredPlan(spec, plan, *std::move(checked.mbmap), slice_options);
      times.slice = clock.Lap();
      FastPath fast_path = shares;
      fast_path.fold = &*checked.fold;
      LOOM_ASSIGN_OR_RETURN(std::optional<Derivation> d,
                            DeriveFast(spec, sliced.plan, &sliced, fast_path, options));
      if (d.has_value()) return finish(*std::move(d), false);
    } else if (!options.plain) {
      return absl::FailedPreconditionError("the fast derivation needs alike micro-batches");
    }
  }
  clock.Lap();
  LOOM_ASSIGN_OR_RETURN(std::optional<SlicedPlan> sliced, SliceFactoredPlan(spec, plan));
  times.slice += clock.Lap();
  if (sliced.has_value()) {
    return finish(Deriver(spec, sliced->plan, &*sliced, {}, options.on_law).Run(), true);
  }
  // Micro-batches that are not copies of one another: derive every copy.
  LOOM_ASSIGN_OR_RETURN(ir::Plan explicit_plan, ir::ExpandPlan(spec, plan));
  times.slice += clock.Lap();
  return finish(Deriver(spec, explicit_plan, nullptr, {}, options.on_law).Run(), true);
}

}  // namespace loom::verify
