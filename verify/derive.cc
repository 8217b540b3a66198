#include "verify/derive.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "verify/contrib.h"

namespace loom::verify {

std::string FailureClassName(FailureClass c) {
  switch (c) {
#define LOOM_FAILURE_NAME_(e, name, words) \
  case FailureClass::e:                    \
    return name;
    LOOM_FAILURE_CLASS_LIST(LOOM_FAILURE_NAME_)
#undef LOOM_FAILURE_NAME_
  }
  return "unknown";
}

std::string FailureClassWords(FailureClass c) {
  switch (c) {
#define LOOM_FAILURE_WORDS_(e, name, words) \
  case FailureClass::e:                     \
    return words;
    LOOM_FAILURE_CLASS_LIST(LOOM_FAILURE_WORDS_)
#undef LOOM_FAILURE_WORDS_
  }
  return "unknown";
}

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

// Input positions in which an op kind is jointly linear (a piece may hold partial
// sums there and the pieces' outputs then add up to the op's output).
std::vector<std::vector<int>> LinearGroups(OpKind kind, int num_inputs) {
  std::vector<int> all(num_inputs);
  for (int i = 0; i < num_inputs; ++i) all[i] = i;
  switch (kind) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kAccumulate:
    case OpKind::kConcat:
      return {all};
    case OpKind::kNeg:
    case OpKind::kScale:
    case OpKind::kTranspose:
    case OpKind::kReshape:
    case OpKind::kSlice:
    case OpKind::kSplit:
    case OpKind::kExpand:
    case OpKind::kPad:
    case OpKind::kSum:
    case OpKind::kStopGradient:
    case OpKind::kMulScalar:
    case OpKind::kDivScalar:
      return {{0}};
    case OpKind::kMul:
    case OpKind::kMatMul:
    case OpKind::kLinearWGrad:
      return {{0}, {1}};
    case OpKind::kLinear:
      return {{0, 2}, {1, 2}};
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingGrad:
      return {{1}};
    default:
      return {};
  }
}

bool Subset(const std::vector<int>& a, const std::vector<int>& b) {
  return std::all_of(a.begin(), a.end(),
                     [&](int x) { return std::find(b.begin(), b.end(), x) != b.end(); });
}

class Deriver {
 public:
  Deriver(const ir::Graph& spec, const ir::Plan& plan) : spec_(spec), plan_(plan) {}

  absl::StatusOr<Derivation> Run();

 private:
  // ---- places
  std::string TaskName(const ir::Task& t) const {
    return absl::StrCat("task ", t.id, " '", ir::OpKindName(t.kind), "'");
  }
  std::string CollName(const ir::Collective& c) const {
    return absl::StrCat("collective ", c.id, " ", ir::CollectiveKindName(c.kind));
  }
  std::string OpName(ir::OpId op) const {
    if (op == ir::kNoId) return "";
    const ir::Op& o = spec_.op(op);
    std::string out = o.outputs.empty() ? "" : spec_.tensor(o.outputs[0]).name;
    return absl::StrCat(ir::OpKindName(o.kind), " -> '", out, "'");
  }
  std::string ProducerName(TensorId t) const {
    if (t == ir::kNoId || t >= spec_.num_tensors()) return "";
    return OpName(spec_.tensor(t).producer);
  }

  void Fail(FailureClass cls, const std::string& item, std::vector<int64_t> devices,
            int microbatch, ValueId value, std::string first_op, std::string message) {
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
    f.position = position_;
    out_.failures.push_back(std::move(f));
  }

  void Undecide(const std::string& item, std::string reason) {
    out_.undecided.push_back({item, std::move(reason)});
  }

  // The fact a claim states (used for plan inputs and, after a failure, so that
  // later items are checked as if the claim held).
  Fact FromClaim(ValueId v) const {
    const ir::PlanValue& pv = plan_.values[v];
    Fact f;
    f.known = true;
    f.tensor = pv.sub.tensor;
    f.box = pv.sub.box;
    f.contrib = pv.sub.part.IsFull()    ? kFullContrib
                : pv.sub.part.IsEmpty() ? kZeroContrib
                                        : kBadContrib;
    return f;
  }

  // Compares a derived fact with value v's claim; records a failure and falls back
  // to the claim when they disagree.
  void SetOutput(ValueId v, Fact derived, const std::string& item, int microbatch,
                 const std::string& first_op, FailureClass wrong_box_class);

  void DeriveLeaf(ValueId v);
  void DeriveTask(const ir::Task& t);
  void DeriveCompute(const ir::Task& t);
  void DeriveLocal(const ir::Task& t);
  void DeriveCollective(const ir::Collective& c);
  void CheckCoverage();

  // Sum (or max) of facts over one region; nullopt after recording a failure.
  std::optional<Fact> Combine(const std::vector<Fact>& facts, ir::ReduceOp reduce,
                              const std::string& item, const std::vector<int64_t>& devices,
                              int microbatch, ValueId place);
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
  ContribStore contribs_;
  std::vector<Fact> facts_;
  std::map<std::string, LawUse> laws_;
  Derivation out_;
  int64_t position_ = 0;
};

void Deriver::SetOutput(ValueId v, Fact derived, const std::string& item, int microbatch,
                        const std::string& first_op, FailureClass wrong_box_class) {
  const ir::PlanValue& pv = plan_.values[v];
  const ir::SubTensor& claim = pv.sub;
  std::vector<int64_t> devices = {pv.device};
  auto name = [&](TensorId t) {
    return t >= 0 && t < spec_.num_tensors() ? spec_.tensor(t).name : std::string("?");
  };
  if (derived.contrib == kBadContrib) {
    facts_[v] = derived;
    return;
  }
  if (derived.tensor != claim.tensor) {
    Fail(FailureClass::kWrongClaim, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims a piece of '", name(claim.tensor), "' but holds a piece of '",
                      name(derived.tensor), "'"));
    facts_[v] = FromClaim(v);
    return;
  }
  if (!(derived.box == claim.box)) {
    Fail(wrong_box_class, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims region ", ir::BoxToString(claim.box), " of '",
                      name(claim.tensor), "' but holds region ", ir::BoxToString(derived.box)));
    facts_[v] = FromClaim(v);
    return;
  }
  const Contrib& c = contribs_.get(derived.contrib);
  if (claim.part.IsFull() && c.kind != Contrib::kFull) {
    FailureClass cls = c.kind == Contrib::kZero ? FailureClass::kMissingPiece
                                                : FailureClass::kMissingReduction;
    Fail(cls, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims the complete value of '", name(claim.tensor), "' ",
                      ir::BoxToString(claim.box), " but holds ", contribs_.Describe(derived.contrib)));
    facts_[v] = FromClaim(v);
    return;
  }
  if (claim.part.IsEmpty() && c.kind != Contrib::kZero) {
    Fail(FailureClass::kWrongClaim, item, devices, microbatch, v, first_op,
         absl::StrCat("value ", v, " claims zeros of '", name(claim.tensor), "' but holds ",
                      contribs_.Describe(derived.contrib)));
    facts_[v] = FromClaim(v);
    return;
  }
  // A share claim on a complete value or on zeros is a zero-split (one member
  // keeps the value, the others hold zeros); sums check that it is counted once.
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
                      spec_.tensor(t).name, "' but nothing in the plan computes it"));
    facts_[v].contrib = kBadContrib;
    return;
  }
  if (facts_[v].contrib == kBadContrib) {
    Fail(FailureClass::kWrongClaim, item, {pv.device}, pv.microbatch, v, "",
         absl::StrCat("plan input value ", v, " claims share ", pv.sub.part.ToString(),
                      " of input tensor '", spec_.tensor(t).name,
                      "'; inputs are loaded whole or as zeros"));
  }
}

void Deriver::DeriveTask(const ir::Task& t) {
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
                          " lies outside the input's ", iv.size(), " elements"));
        OutputsFromClaims(t.outputs);
        return;
      }
      SetOutput(t.outputs[0], out, item, mb, "", FailureClass::kWrongShard);
      return;
    }
    case OpKind::kFill: {
      auto value = t.attrs.GetFloat("value");
      const ValueId v = t.outputs[0];
      Fact out = FromClaim(v);
      out.contrib = kZeroContrib;
      if (!value.ok() || *value != 0.0) {
        Fail(FailureClass::kComputationDiffers, item, {dev}, mb, v, "",
             absl::StrCat("fill with ", value.ok() ? absl::StrCat(*value) : "no value",
                          " stands for a share of '", spec_.tensor(out.tensor).name,
                          "'; only zero shares are exact"));
        OutputsFromClaims(t.outputs);
        return;
      }
      SetOutput(v, out, item, mb, "", FailureClass::kWrongShard);
      return;
    }
    case OpKind::kAccumulate: {
      std::vector<Fact> in;
      for (ValueId v : t.inputs) in.push_back(facts_[v]);
      auto sum = Combine(in, ir::ReduceOp::kSum, item, {dev}, mb, t.outputs[0]);
      if (!sum) {
        OutputsFromClaims(t.outputs);
        return;
      }
      SetOutput(t.outputs[0], *sum, item, mb, "", FailureClass::kWrongShard);
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

std::optional<Fact> Deriver::Combine(const std::vector<Fact>& facts, ir::ReduceOp reduce,
                                     const std::string& item,
                                     const std::vector<int64_t>& devices, int microbatch,
                                     ValueId place) {
  for (size_t i = 1; i < facts.size(); ++i) {
    if (facts[i].tensor != facts[0].tensor) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat("combines a piece of '", spec_.tensor(facts[0].tensor).name,
                        "' with a piece of '", spec_.tensor(facts[i].tensor).name, "'"));
      return std::nullopt;
    }
    if (!(facts[i].box == facts[0].box)) {
      Fail(FailureClass::kWrongGroup, item, devices, microbatch, place, "",
           absl::StrCat("combines region ", ir::BoxToString(facts[0].box), " with region ",
                        ir::BoxToString(facts[i].box), " of '",
                        spec_.tensor(facts[0].tensor).name, "' (member ", i, ")"));
      return std::nullopt;
    }
  }
  std::vector<ContribId> ids;
  for (const Fact& f : facts) ids.push_back(f.contrib);
  ContribStore::SumResult r = contribs_.Sum(ids, reduce);
  if (!r.ok) {
    Fail(r.cls, item, devices, microbatch, place, "",
         absl::StrCat(r.message, " of '", spec_.tensor(facts[0].tensor).name, "' ",
                      ir::BoxToString(facts[0].box)));
    return std::nullopt;
  }
  Fact out = facts[0];
  out.contrib = r.id;
  return out;
}

#include "verify/derive_compute.inc"
#include "verify/derive_collective.inc"

}  // namespace

absl::StatusOr<Derivation> DeriveLineage(const ir::Graph& spec, const ir::Plan& plan) {
  if (plan.is_factored()) {
    return absl::InvalidArgumentError("DeriveLineage needs an explicit plan");
  }
  LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
  return Deriver(spec, plan).Run();
}

}  // namespace loom::verify
