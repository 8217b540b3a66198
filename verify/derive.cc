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

namespace loom::verify {

namespace {

using ir::Box;
using ir::Interval;
using ir::OpKind;
using ir::TensorId;
using ir::ValueId;

// What one value holds.
struct Fact {
  bool known = false;
  TensorId tensor = ir::kNoId;
  Box box;
  ContribId contrib = kBadContrib;
};

// Ops whose pieces write the part of an output-only dim (a vocabulary range) that
// their attributes name (vocab_begin, vocab).
bool WritesClaimedVocabRange(OpKind kind) {
  return kind == OpKind::kPickGrad || kind == OpKind::kEmbeddingGrad;
}

bool Subset(const std::vector<int>& a, const std::vector<int>& b) {
  return std::all_of(a.begin(), a.end(),
                     [&](int x) { return std::find(b.begin(), b.end(), x) != b.end(); });
}

// How an item's outputs are checked against their claims.
struct OutputRule {
  FailureClass wrong_box = FailureClass::kWrongShard;     // the region differs
  FailureClass wrong_tensor = FailureClass::kWrongClaim;  // the tensor differs
  // A sum one of whose members held zeros: a result short of complete lacks a
  // piece rather than a reduction.
  bool zero_member = false;
};
// Tasks compute or cut their outputs; collectives move them between devices, so
// a region or tensor other than the claimed one came from the wrong member.
constexpr OutputRule kTaskRule{};
constexpr OutputRule kCollectiveRule{FailureClass::kWrongGroup, FailureClass::kWrongGroup, false};

// The fast derivation (see DeriveLineage): opaque shares, and a factored plan's
// alike layers folded before slicing.
struct FastPath {
  bool shares = false;
  const LayerFold* fold = nullptr;  // the unit's folding, for a slice of it
};

class Deriver {
 public:
  Deriver(const ir::Graph& spec, const ir::Plan& plan, const SlicedPlan* sliced = nullptr,
          FastPath fast = {}, std::function<void(const LawUse&)> on_law = {})
      : spec_(spec), plan_(plan), sliced_(sliced), fast_(fast), on_law_(std::move(on_law)) {}

  absl::StatusOr<Derivation> Run();
  // The fast derivation met something it does not decide on its own (a folded
  // layer's representative that does not derive cleanly, a folded value the
  // renaming does not reach): derive the plan the plain way instead.
  bool fast_failed() const { return fast_failed_; }

 private:
  // Walks the items of `active` (tasks, then collectives, then phantoms), or every
  // item when null. Isolated: a stage on its own, whose inputs hold what they
  // claim. Otherwise the whole plan: values only skipped items compute hold what
  // they claim, the others are plan inputs.
  absl::Status Walk(const std::vector<int64_t>& items, bool isolated,
                    const std::vector<char>* active = nullptr);
  // Derives the first stage of each class of alike stages on its own (verify/
  // stages.h); returns which items the walk must still derive. A class whose
  // first stage derived with no failure and nothing undecided is not walked:
  // every stage's boundary outputs get the first stage's contents, renamed
  // (preset_). Any other class is walked in place, every stage of it.
  std::vector<char> DeriveStageClasses();
  // Presets the boundary outputs of `member`, a stage alike `first` whose values
  // hold `first_facts` (by position in first.values); false when a content does
  // not carry over (an op the renaming does not reach).
  bool PresetAlike(const Stage& first, const std::vector<Fact>& first_facts,
                   const Stage& member);
  // The renaming of alike stages `from` -> `to`, ops and the tensors of opaque
  // shares, with micro-batch copies of either; `reached` turns false when asked
  // for one outside them.
  struct Renaming {
    absl::flat_hash_map<ir::OpId, ir::OpId> ops;
    absl::flat_hash_map<TensorId, TensorId> tensors;
    bool reached = true;
  };
  Renaming MakeRenaming(const Stage& from, const Stage& to) const;
  ContribId Rename(ContribId c, Renaming& r);
  // Presets the slice's values that folded stages of the unit compute from the
  // facts of their representative's slice stage `rep` (derived on its own as
  // `first`, whose facts are first_facts); false when one does not carry over.
  bool PresetFolded(const Stage& first, const std::vector<Fact>& first_facts, const Stage& rep);
  // Opaque shares: the group of every value, from the unit's (sliced) or found
  // by the stage partition (explicit).
  void ShareGroupsFromUnit();
  // Checks, for every group all of whose members the walk computed, that what
  // they hold adds up to the complete value.
  void CheckShareGroups(const std::function<bool(ValueId)>& walked);

  // ---- places
  std::string TaskName(const ir::Task& t) const {
    return absl::StrCat("task ", t.id, " '", ir::OpKindName(t.kind), "'");
  }
  std::string CollName(const ir::Collective& c) const {
    return absl::StrCat("collective ", c.id, " ", ir::CollectiveKindName(c.kind));
  }
  // "linear -> 'h1'", naming the op's output `k`.
  std::string OpName(ir::OpId op, int k = 0) const {
    if (op == ir::kNoId) return "";
    const ir::Op& o = spec_.op(op);
    std::string out = static_cast<int>(o.outputs.size()) > k ? spec_.tensor(o.outputs[k]).name : "";
    return absl::StrCat(ir::OpKindName(o.kind), " -> '", out, "'");
  }
  std::string ProducerName(TensorId t) const {
    if (t == ir::kNoId || t >= spec_.num_tensors()) return "";
    return OpName(spec_.tensor(t).producer);
  }

  void Fail(FailureClass cls, const std::string& item, std::vector<int64_t> devices,
            int microbatch, ValueId value, std::string first_op, std::string message,
            std::string counterexample) {
    Failure f;
    f.cls = cls;
    f.item = item;
    f.devices = std::move(devices);
    f.microbatch = microbatch;
    if (value != ir::kNoId) {
      const ir::PlanValue& v = plan_.values[value];
      if (v.sub.tensor >= 0 && v.sub.tensor < spec_.num_tensors()) {
        f.tensor = spec_.tensor(v.sub.tensor).name;
      }
      f.box = ir::BoxToString(v.sub.box);
      f.part = v.sub.part.ToString();
      if (first_op.empty()) first_op = ProducerName(v.sub.tensor);
    }
    f.first_op = std::move(first_op);
    f.message = std::move(message);
    f.counterexample = std::move(counterexample);
    f.position = position_;
    out_.failures.push_back(std::move(f));
  }

  void Undecide(const std::string& item, std::string reason) {
    out_.undecided.push_back({item, std::move(reason)});
  }

  // The fact a claim states (used for plan inputs and, after a failure, so that
  // later items are checked as if the claim held).
  // An opaque share's claim is what it holds for its readers.
  Fact FromClaim(ValueId v) {
    const ir::PlanValue& pv = plan_.values[v];
    Fact f;
    f.known = true;
    f.tensor = pv.sub.tensor;
    f.box = pv.sub.box;
    f.contrib = pv.sub.part.IsFull()    ? kFullContrib
                : pv.sub.part.IsEmpty() ? kZeroContrib
                : IsShare(v) ? contribs_.Share(pv.sub.tensor, pv.sub.box, pv.sub.part,
                                               TensorName(pv.sub.tensor))
                             : kBadContrib;
    f.contrib = contribs_.Scaled(f.contrib, pv.sub.scale);
    return f;
  }
  bool IsShare(ValueId v) const {
    return !share_group_.empty() && share_group_[v] >= 0;
  }

  std::string TensorName(TensorId t) const {
    return t >= 0 && t < spec_.num_tensors() ? spec_.tensor(t).name : std::string("?");
  }

  // Compares a derived fact with value v's claim; records a failure and falls back
  // to the claim when they disagree.
  void SetOutput(ValueId v, Fact derived, const std::string& item, int microbatch,
                 const std::string& first_op, OutputRule rule);

  // A logical op's input and output types and partition signature, computed
  // once per op (every piece of it reads the same).
  struct OpTypes {
    std::vector<ir::TensorType> in, out;
    absl::StatusOr<ir::DimSignature> sig;
  };
  const OpTypes& TypesOf(ir::OpId op) {
    auto it = op_types_.find(op);
    if (it != op_types_.end()) return *it->second;
    auto types = std::make_unique<OpTypes>();
    const ir::Op& o = spec_.op(op);
    for (TensorId x : o.inputs) types->in.push_back(spec_.tensor(x).type());
    for (TensorId y : o.outputs) types->out.push_back(spec_.tensor(y).type());
    types->sig = ir::GetOpSchema(o.kind).signature(types->in, o.attrs);
    return *op_types_.emplace(op, std::move(types)).first->second;
  }

  // Whether spec tensor `t` is a fill with 0 (any multiple of a piece of it is
  // itself: its factor does not matter).
  bool IsZeroFill(TensorId t) const {
    const ir::OpId p = spec_.tensor(t).producer;
    if (p == ir::kNoId || spec_.op(p).kind != OpKind::kFill) return false;
    auto value = spec_.op(p).attrs.GetFloat("value");
    return value.ok() && *value == 0.0;
  }
  void DeriveLeaf(ValueId v);
  void DeriveTask(const ir::Task& t);
  void DeriveCompute(const ir::Task& t);
  // Checks that a compute task reads the op's operands in order; records a
  // failure (swapped, doubled or missing operand of a sum, other) and returns
  // false when it does not. The operands of a commutative op may come in any
  // order: then `in_spec_order` gets the task's inputs in the op's order.
  bool CheckOperands(const ir::Task& t, const ir::Op& o, const std::string& item,
                     const std::string& first_op, std::vector<ValueId>* in_spec_order);
  // Complete operands meeting Partial(avg) pieces in a linear op, read as n times
  // their even share (EvenShareFactors, verify/homogeneity.h): rewrites `in` and
  // `factor` of a compute task's operands.
  void AsEvenShares(ir::OpKind kind, const OpTypes& types, std::vector<Fact>& in,
                    std::vector<ir::Rational>& factor, const std::vector<char>& zero);
  // For a piece whose attributes differ from `expected` only in factors its output
  // is proportional to (scale's factor) or divisors it is inversely proportional
  // to (a loss's token count): the ratio of its output to the expected piece's.
  std::optional<ir::Rational> AttributeFactor(const ir::Task& t, const ir::Op& o,
                                              const ir::AttrMap& expected) const;
  // Records the failure of a piece whose attributes differ from `expected`.
  void FailAttributes(const ir::Task& t, const ir::Op& o, const ir::AttrMap& expected,
                      const std::string& item, const std::string& first_op);
  // What the values `inputs` hold, as kernel operands.
  std::vector<KernelOperand> Operands(const std::vector<ValueId>& inputs) const;
  // An element of `whole` outside every box ("[0,4]").
  std::string FirstGap(const Box& whole, const std::vector<Box>& boxes) const;
  void DeriveLocal(const ir::Task& t);
  void DeriveCollective(const ir::Collective& c);
  // A data-parallel sum listed for the derived replicas only (SlicedPlan::
  // elided): each member's replicas summed in closed form, then the members.
  void DeriveReplicaSum(const ir::Collective& c, const std::vector<Fact>& in);
  void CheckCoverage();

  // ---- sliced factored plans (derive_factored.inc)
  std::string OpOutputName(ir::OpId op, int k) const;
  ContribId MapMicrobatch(ContribId c, int m);
  void DerivePhantom(const Phantom& p);
  // The fact a + t (b - a), bound by bound; nullopt when they do not extrapolate.
  std::optional<Fact> Extrapolate(const Fact& a, const Fact& b, int64_t t);
  // False (after recording why) when a micro-batch-0 item reads a value outside
  // the micro-batches whose contents differ per micro-batch copy.
  bool MicrobatchInvariantInputs(const std::vector<ValueId>& inputs, int mb,
                                 const std::string& item, const std::vector<ValueId>& outputs);
  // Every value of replica dp - 1 holds what replicas 0 and 1 extrapolate to
  // (those `walked` accepts, when given).
  void CheckReplicas(const std::function<bool(ValueId)>* walked = nullptr);

  // A local slice's result as the piece of a split's output it is, where the value
  // claims that output (`claimed`) and the slice's positions of the split's input
  // lie within it (a rank's micro-batch of its rows of the batch, which the spec
  // splits into micro-batches of its own); nullopt otherwise.
  std::optional<Fact> AsSplitPiece(const Fact& sliced, TensorId claimed, int64_t dim) const;
  // A local concat of values each holding the whole of one of consecutive inputs of
  // a spec concat along the same dim, as the region of its output they make (a
  // pipeline stage's stack of its own parameters' norms, where the spec stacks every
  // parameter's); nullopt otherwise.
  std::optional<Fact> AsConcatRegion(const std::vector<Fact>& in, int64_t dim) const;
  // Sum (or max) of facts over one region; nullopt after recording a failure.
  // `zero_member` (optional) tells whether a member held zeros.
  std::optional<Fact> Combine(const std::vector<Fact>& facts, ir::ReduceOp reduce,
                              const std::string& item, const std::vector<int64_t>& devices,
                              int microbatch, ValueId place, bool* zero_member = nullptr);
  // Facts joined along `dim` in order (an all-gather's members, a local concat's
  // operands, named by `names`): pieces of one tensor whose regions follow each
  // other along `dim`. Members holding different contributions make a value that
  // is complete only if each member is: checked when `claims_full`, a wrong group
  // otherwise. nullopt after recording a failure.
  std::optional<Fact> Gather(const std::vector<Fact>& in, int dim,
                             const std::vector<std::string>& names, bool claims_full,
                             const std::string& item, const std::vector<int64_t>& devices,
                             int microbatch, ValueId place);
  // The share claims of values that meet in one sum (or max), which the
  // derivation found to hold `sum`: the members' shares must be disjoint, make
  // the whole value when the sum is complete, and make what each result claims,
  // but where a result is a zero-split member (it holds the complete value or
  // zeros and claims a share of a later sum, checked where that sum is made).
  // Checked after the sum itself was found right: a wrong claim there is a
  // promise to the value's readers that the numbers happen not to break.
  // False after recording a failure.
  bool CheckSharesMeet(const std::vector<ValueId>& inputs, const std::vector<ValueId>& outputs,
                       const Fact& sum, const std::string& item,
                       const std::vector<int64_t>& devices, int microbatch);
  void OutputsFromClaims(const std::vector<ValueId>& outputs) {
    for (ValueId v : outputs) facts_[v] = FromClaim(v);
  }
  bool AnyBad(const std::vector<ValueId>& inputs) const {
    for (ValueId v : inputs) {
      if (!facts_[v].known || facts_[v].contrib == kBadContrib) return true;
    }
    return false;
  }

  const ir::Graph& spec_;
  const ir::Plan& plan_;
  const SlicedPlan* sliced_ = nullptr;
  const FastPath fast_;
  const std::function<void(const LawUse&)> on_law_;
  bool fast_failed_ = false;
  // Opaque shares: group of each value (empty: none), members of each group,
  // and what each member derived to hold (its readers see its claim).
  std::vector<int> share_group_;
  std::vector<std::vector<ValueId>> share_members_;
  absl::flat_hash_map<ValueId, Fact> share_held_;
  // Folding: the slice's values that left-out stages compute, by the layer of the
  // stage standing for theirs.
  absl::flat_hash_map<int, std::vector<ValueId>> folded_values_;
  ContribStore contribs_;
  absl::flat_hash_map<ir::OpId, std::unique_ptr<OpTypes>> op_types_;
  std::vector<Fact> facts_;
  absl::flat_hash_map<ValueId, Fact> preset_;
  // Values of folded layers that hold what they claim (1), where preset_ has none.
  std::vector<char> preset_claim_;
  std::map<std::string, LawUse> laws_;
  Derivation out_;
  int64_t position_ = 0;
};

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

// The measure of a share (the sum of its pieces' lengths); nullopt where the
// arithmetic would leave 64 bits.
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

#include "verify/derive_operands.inc"
#include "verify/derive_compute.inc"
#include "verify/derive_collective.inc"
#include "verify/derive_factored.inc"

}  // namespace

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

absl::StatusOr<Derivation> DeriveLineage(const ir::Graph& spec, const ir::Plan& plan,
                                         const DeriveOptions& options) {
  Clock clock;
  Derivation::Times times;
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  // A factored plan's alike layers are folded while the spec's micro-batch map is
  // built and the plan's structure is checked (on another thread where there is
  // one); the fold cuts the stages before it needs the map. Then the plan's types
  // are checked, except those of the items the fold leaves out: each has the
  // kinds, attributes, claims and types of an item of its class's first stage
  // (the stage encoding compares everything the type checks read), which is
  // checked. The fold is used only once the checks pass. The micro-batch
  // symmetry the slice needs is checked copy by copy by both threads: this one
  // once it has checked the structure and helped the fold encode the stages, the
  // fold's once the fold is done.
  std::optional<LayerFold> fold;
  absl::StatusOr<ir::MicrobatchMap> mbmap = absl::UnknownError("not built");
  bool symmetric = false;
  if (options.fast && plan.is_factored() && threads >= 2) {
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
      fold = FoldLayers(
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
    mbmap = ir::MicrobatchMap::Build(spec);
    if (mbmap.ok()) symmetry = std::make_unique<MicrobatchSymmetry>(spec, *mbmap);
    built.set_value(mbmap.ok() ? &*mbmap : nullptr);
    absl::Status valid =
        mbmap.ok() ? ir::ValidatePlanStructure(spec, plan, *mbmap) : ir::ValidatePlan(spec, plan);
    if (valid.ok()) {
      help.Help();
      check_copies();
    }
    times.validate = clock.Lap();
    folder.join();
    times.fold = clock.Lap();
    symmetric = valid.ok() && symmetry != nullptr && symmetry->status().ok() &&
                copies_alike.load() && next_copy.load() >= symmetry->microbatches();
    if (valid.ok() && mbmap.ok()) {
      ir::ImpliedTypes implied;
      std::vector<char> left_out_values;
      if (fold.has_value() && symmetric) {
        implied.tasks = &fold->skip_tasks;
        implied.collectives = &fold->skip_collectives;
        // Every value a left-out stage names (computes or reads) has the claim,
        // type and tensor type of the value in the same place of its
        // representative, which is checked: those a representative names are not
        // left out.
        left_out_values.assign(plan.values.size(), 0);
        for (const LayerFold::Member& m : fold->members) {
          for (ir::ValueId v : fold->unit.stages[m.stage].values) left_out_values[v] = 1;
        }
        for (int r : fold->reps) {
          for (ir::ValueId v : fold->unit.stages[r].values) left_out_values[v] = 0;
        }
        implied.values = &left_out_values;
      }
      valid = ir::ValidatePlanTypes(spec, plan, *mbmap, implied);
      times.validate += clock.Lap();
    }
    LOOM_RETURN_IF_ERROR(valid);
  } else {
    mbmap = ir::MicrobatchMap::Build(spec);
    if (mbmap.ok()) {
      LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan, *mbmap));
    } else {
      LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
    }
    times.validate = clock.Lap();
    if (options.fast && plan.is_factored() && mbmap.ok()) {
      symmetric = CheckMicrobatchSymmetry(spec, *mbmap).ok();
      if (symmetric && ir::ValidateFactoring(plan, *mbmap).ok() && IdsInRange(spec, plan)) {
        fold = FoldLayers(spec, plan, *mbmap);
      }
      times.fold = clock.Lap();
    }
  }
  if (!symmetric) fold.reset();
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
      Deriver fast(spec, plan, nullptr, shares, options.on_law);
      LOOM_ASSIGN_OR_RETURN(Derivation d, fast.Run());
      if (!options.plain || (!fast.fast_failed() && Clean(d))) {
        if (fast.fast_failed()) d.undecided.push_back({"derivation", "the fast derivation gave up"});
        return finish(std::move(d), false);
      }
    }
    return finish(Deriver(spec, plan, nullptr, {}, options.on_law).Run(), true);
  }
  if (options.fast) {
    if (fold.has_value()) {
      SliceOptions slice_options;
      slice_options.skip_tasks = &fold->skip_tasks;
      slice_options.skip_collectives = &fold->skip_collectives;
      slice_options.skip_outputs = &fold->skip_outputs;
      slice_options.compress_replicas = true;
      const SlicedPlan sliced = SliceFactoredPlan(spec, plan, *std::move(mbmap), slice_options);
      times.slice = clock.Lap();
      {
        FastPath fast_path = shares;
        fast_path.fold = &*fold;
        Deriver fast(spec, sliced.plan, &sliced, fast_path, options.on_law);
        LOOM_ASSIGN_OR_RETURN(Derivation d, fast.Run());
        if (!options.plain || (!fast.fast_failed() && Clean(d))) {
          if (fast.fast_failed()) {
            d.undecided.push_back({"derivation", "the fast derivation gave up"});
          }
          return finish(std::move(d), false);
        }
      }
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
