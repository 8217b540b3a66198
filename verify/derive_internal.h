#ifndef LOOM_VERIFY_DERIVE_INTERNAL_H_
#define LOOM_VERIFY_DERIVE_INTERNAL_H_

// Internal to the lineage derivation (verify/derive.h): the Deriver that walks a
// plan, and what it records per value. Its parts are defined by concept:
// verify/derive.cc (setting a value, local tasks, shares and their sums, the entry
// point), derive_operands.cc (a compute task's operands and attributes against
// its logical op), derive_compute.cc (what a compute task's outputs hold),
// derive_collective.cc (what a collective's outputs hold), derive_factored.cc (a
// factored plan's slice and folded layers) and derive_walk.cc (the walk, layer
// stages, share groups, the coverage of outputs).

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
#include "verify/derive.h"

namespace loom::verify::derivation {

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
// their attributes name: an offset (vocab_begin) into a dim they size (vocab).
inline bool WritesClaimedVocabRange(OpKind kind) {
  const ir::OpSchema& schema = ir::GetOpSchema(kind);
  if (schema.resize_attrs == nullptr) return false;
  return std::any_of(schema.attr_roles.begin(), schema.attr_roles.end(),
                     [](const ir::AttrUse& a) { return a.role == ir::AttrRole::kOffset; });
}

inline bool Subset(const std::vector<int>& a, const std::vector<int>& b) {
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
inline constexpr OutputRule kTaskRule{};
inline constexpr OutputRule kCollectiveRule{FailureClass::kWrongGroup, FailureClass::kWrongGroup, false};

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
  // A compute task while DeriveCompute derives its piece: where its findings are
  // placed, and what each step establishes for the next.
  struct ComputePiece {
    const ir::Task* task = nullptr;
    const ir::Op* op = nullptr;
    std::string item, first_op;
    int mb = 0;
    std::vector<int64_t> devs;
    ValueId place = ir::kNoId;
    const OpTypes* types = nullptr;             // the op's input and output types
    const ir::DimSignature* sig = nullptr;      // its partition signature
    std::vector<Fact> in;                       // what each operand holds, unscaled
    ir::Rational out_factor = ir::Rational::One();
    std::map<std::string, Interval> interval;   // each label's interval in the piece
    std::map<std::string, int64_t> extent;      // and the extent it is an interval of
    std::vector<Box> out_boxes;
    std::vector<ContribId> out_contrib;
    std::vector<int> linear_group;              // the positions the piece is additive in
  };
  // The steps of DeriveCompute, in order. Each returns false when it recorded a
  // finding; the task's outputs then read as their claims.
  bool UnscaleOperands(ComputePiece& p);
  bool LabelIntervals(ComputePiece& p);
  bool OutputBoxes(ComputePiece& p);
  bool OutputContributions(ComputePiece& p);
  bool PieceAttributes(ComputePiece& p);
  void RecordLaw(const ComputePiece& p);
  // A failure of the piece (its outputs then read as their claims), and a piece the
  // derivation cannot decide (its outputs opaque): both return false.
  bool FailPiece(const ComputePiece& p, FailureClass cls, std::string message,
                 std::string counterexample);
  bool UndecidePiece(const ComputePiece& p, std::string reason);
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
  // A local attention_merge of two partial softmaxes.
  void DeriveMerge(const ir::Task& t);
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

// The measure of a share (the sum of its pieces' lengths); nullopt where the
// arithmetic would leave 64 bits.
std::optional<ir::Rational> Measure(const ir::ValuePart& part);

}  // namespace loom::verify::derivation

#endif  // LOOM_VERIFY_DERIVE_INTERNAL_H_
