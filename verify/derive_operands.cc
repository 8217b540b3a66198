// Deriver: the operands and attributes of a compute task, checked against its
// logical op.

#include "verify/derive_internal.h"

namespace loom::verify::derivation {
namespace {

using ir::AttrRole;

// The role the op's schema gives attribute `name`, where it matters here: a
// factor the op's output is proportional to, a divisor it is inversely
// proportional to (a different value scales the output), or the offset of the
// piece in the op's index space (a different value shifts the piece: a wrong
// offset). Other attribute differences change the computation.
std::optional<AttrRole> RoleOf(OpKind kind, const std::string& name) {
  const std::optional<AttrRole> role = ir::GetOpSchema(kind).RoleOf(name);
  if (role == AttrRole::kFactor || role == AttrRole::kDivisor || role == AttrRole::kOffset) {
    return role;
  }
  return std::nullopt;
}

}  // namespace

std::vector<KernelOperand> Deriver::Operands(const std::vector<ValueId>& inputs) const {
  std::vector<KernelOperand> out;
  for (ValueId v : inputs) {
    out.push_back({facts_[v].tensor, ir::Shape(ir::BoxDims(facts_[v].box)), plan_.values[v].dtype});
  }
  return out;
}

bool Deriver::CheckOperands(const ir::Task& t, const ir::Op& o, const std::string& item,
                            const std::string& first_op, std::vector<ValueId>* in_spec_order) {
  const int mb = t.info.microbatch;
  const ValueId place = t.outputs.empty() ? ir::kNoId : t.outputs[0];
  std::map<TensorId, std::vector<int>> task_at, spec_at;  // positions of each tensor
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    task_at[facts_[t.inputs[i]].tensor].push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < o.inputs.size(); ++i) spec_at[o.inputs[i]].push_back(static_cast<int>(i));
  size_t first = 0;  // the first position where the operands differ
  while (first < t.inputs.size() && first < o.inputs.size() &&
         facts_[t.inputs[first]].tensor == o.inputs[first]) {
    ++first;
  }
  if (first == t.inputs.size() && first == o.inputs.size()) return true;
  auto times = [](size_t n) -> std::string {
    return n == 1 ? "once" : n == 2 ? "twice" : absl::StrCat(n, " times");
  };
  auto same_count = [&](const std::map<TensorId, std::vector<int>>& a,
                        const std::map<TensorId, std::vector<int>>& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [x, at] : a) {
      auto it = b.find(x);
      if (it == b.end() || it->second.size() != at.size()) return false;
    }
    return true;
  };
  if (same_count(task_at, spec_at) && ir::GetOpSchema(o.kind).commutative) {
    // The spec's operands in another order, which does not change the result.
    std::map<TensorId, size_t> used;
    for (TensorId x : o.inputs) in_spec_order->push_back(t.inputs[task_at[x][used[x]++]]);
    return true;
  }
  if (same_count(task_at, spec_at)) {
    // The spec's operands in another order: run the piece both ways.
    std::vector<KernelOperand> task_ops = Operands(t.inputs), spec_ops;
    std::map<TensorId, size_t> used;
    for (TensorId x : o.inputs) spec_ops.push_back(task_ops[task_at[x][used[x]++]]);
    const TensorId got = facts_[t.inputs[first]].tensor;
    std::string example = KernelExample(t.kind, task_ops, t.attrs, spec_ops, t.attrs);
    if (example.empty()) {
      example = TensorExample(TensorName(got), TensorName(o.inputs[first]),
                              absl::StrCat("operand ", first, " holds"),
                              absl::StrCat("the spec's operand ", first, " holds"));
    }
    Fail(FailureClass::kSwappedOperands, item, {t.device}, mb, place, first_op,
         absl::StrCat("operand ", first, " holds a piece of '", TensorName(got),
                      "' where the spec reads '", TensorName(o.inputs[first]),
                      "' (the spec's operand ", spec_at[got][0], ")"),
         std::move(example));
    return false;
  }
  if (ir::GetOpSchema(o.kind).sums_operands) {
    // A sum reading a tensor more often than the spec adds it, or missing one.
    bool foreign = false;
    for (const auto& [x, at] : task_at) foreign |= spec_at.count(x) == 0;
    std::optional<TensorId> over, under;
    for (const auto& [x, at] : task_at) {
      if (!over && spec_at.count(x) > 0 && at.size() > spec_at[x].size()) over = x;
    }
    for (const auto& [x, at] : spec_at) {
      if (!under && (task_at.count(x) == 0 || task_at[x].size() < at.size())) under = x;
    }
    // The tensor in question set to 1, every other operand to 0.
    auto example = [&](TensorId x) {
      const size_t got = task_at.count(x) > 0 ? task_at[x].size() : 0;
      return absl::StrCat("with '", TensorName(x), "' equal to 1 and the other operands 0: the "
                          "task's sum is ", got, " where the spec's is ", spec_at[x].size());
    };
    if (!foreign && over) {
      Fail(FailureClass::kDoubledPiece, item, {t.device}, mb, place, first_op,
           absl::StrCat("adds '", TensorName(*over), "' ", times(task_at[*over].size()),
                        " (operands ", absl::StrJoin(task_at[*over], ","),
                        ") where the spec adds it ", times(spec_at[*over].size())),
           example(*over));
      return false;
    }
    if (!foreign && under) {
      Fail(FailureClass::kMissingPiece, item, {t.device}, mb, place, first_op,
           absl::StrCat("the spec also adds '", TensorName(*under),
                        "', which no operand of the task holds"),
           example(*under));
      return false;
    }
  }
  if (first < t.inputs.size() && first < o.inputs.size()) {
    const TensorId got = facts_[t.inputs[first]].tensor;
    Fail(FailureClass::kComputationDiffers, item, {t.device}, mb, place, first_op,
         absl::StrCat("operand ", first, " holds a piece of '", TensorName(got),
                      "' where the spec reads '", TensorName(o.inputs[first]), "'"),
         TensorExample(TensorName(got), TensorName(o.inputs[first]),
                       absl::StrCat("operand ", first, " holds"),
                       absl::StrCat("the spec's operand ", first, " holds")));
  } else {
    Fail(FailureClass::kComputationDiffers, item, {t.device}, mb, place, first_op,
         absl::StrCat("computes '", ir::OpKindName(t.kind), "' with ", t.inputs.size(),
                      " inputs where the spec computes it with ", o.inputs.size()),
         absl::StrCat("with every input equal to 1: the task reads ", t.inputs.size(),
                      " inputs where the spec reads ", o.inputs.size()));
  }
  return false;
}

std::optional<ir::Rational> Deriver::AttributeFactor(const ir::Task& t, const ir::Op& o,
                                                      const ir::AttrMap& expected) const {
  if (t.attrs.values().size() != expected.values().size()) return std::nullopt;
  ir::Rational ratio = ir::Rational::One();
  for (const auto& [name, want] : expected.values()) {
    const ir::AttrValue* got_value = t.attrs.Find(name);
    if (got_value == nullptr) return std::nullopt;
    if (*got_value == want) continue;
    const std::optional<AttrRole> role = RoleOf(o.kind, name);
    if (role != AttrRole::kFactor && role != AttrRole::kDivisor) return std::nullopt;
    auto got = t.attrs.GetFloat(name);
    auto exp = expected.GetFloat(name);
    if (!got.ok() || !exp.ok()) return std::nullopt;
    const std::optional<ir::Rational> g = ir::RationalOfDouble(*got);
    const std::optional<ir::Rational> e = ir::RationalOfDouble(*exp);
    if (!g.has_value() || !e.has_value() || g->num == 0 || e->num == 0) return std::nullopt;
    const std::optional<ir::Rational> r =
        role == AttrRole::kFactor ? ir::Divide(*g, *e) : ir::Divide(*e, *g);
    if (!r.has_value()) return std::nullopt;
    const std::optional<ir::Rational> next = ir::Multiply(ratio, *r);
    if (!next.has_value()) return std::nullopt;
    ratio = *next;
  }
  return ratio;
}

void Deriver::FailAttributes(const ir::Task& t, const ir::Op& o, const ir::AttrMap& expected,
                             const std::string& item, const std::string& first_op) {
  FailureClass cls = FailureClass::kComputationDiffers;
  std::string detail, example;
  // Every attribute either side sets; an offset left out is 0 (its default).
  std::vector<std::string> names;
  for (const auto& [name, want] : expected.values()) names.push_back(name);
  for (const auto& [name, got] : t.attrs.values()) {
    if (!expected.Has(name) && RoleOf(o.kind, name) == AttrRole::kOffset) names.push_back(name);
  }
  for (const std::string& name : names) {
    const ir::AttrValue* got_value = t.attrs.Find(name);
    const ir::AttrValue* want = expected.Find(name);
    if (got_value != nullptr && want != nullptr && *got_value == *want) continue;
    const std::optional<AttrRole> role = RoleOf(o.kind, name);
    const double fallback = 0;
    auto got = role == AttrRole::kOffset && got_value == nullptr ? absl::StatusOr<double>(fallback)
                                                                 : t.attrs.GetFloat(name);
    auto exp = role == AttrRole::kOffset && want == nullptr ? absl::StatusOr<double>(fallback)
                                                            : expected.GetFloat(name);
    if (got.ok() && exp.ok()) {
      detail = absl::StrCat("attribute '", name, "' is ", *got, " where the spec's piece has ", *exp);
      example = absl::StrCat("attribute '", name, "': ", *got, " where the spec's piece has ", *exp);
      if (role == AttrRole::kOffset) {
        cls = FailureClass::kWrongShard;
        absl::StrAppend(&detail, " (the piece's offset, shifted by ", *got - *exp, ")");
      } else if (role.has_value() && *exp != 0 && *got != 0) {
        cls = FailureClass::kScaled;
        const double by = role == AttrRole::kFactor ? *got / *exp : *exp / *got;
        absl::StrAppend(&detail, " (scaled by ", by, ")");
      }
    } else {
      detail = absl::StrCat("attribute '", name, "' differs from the spec's piece");
      example = detail;
    }
    break;
  }
  if (detail.empty()) detail = example = "attributes differ from the spec's piece";
  const std::vector<KernelOperand> ops = Operands(t.inputs);
  std::string run = KernelExample(t.kind, ops, t.attrs, ops, expected);
  Fail(cls, item, {t.device}, t.info.microbatch, t.outputs.empty() ? ir::kNoId : t.outputs[0],
       first_op,
       absl::StrCat(detail, " (task ", t.attrs.ToString(), ", spec ", expected.ToString(), ")"),
       run.empty() ? example : absl::StrCat(run, " (", example, ")"));
}

std::string Deriver::FirstGap(const Box& whole, const std::vector<Box>& boxes) const {
  // A gap has a corner at 0 or at the end of some box along every dim.
  std::vector<std::vector<int64_t>> candidates(whole.size());
  int64_t count = 1;
  for (size_t d = 0; d < whole.size(); ++d) {
    std::set<int64_t> c = {whole[d].begin};
    for (const Box& b : boxes) {
      if (b[d].end < whole[d].end) c.insert(b[d].end);
    }
    candidates[d].assign(c.begin(), c.end());
    count *= static_cast<int64_t>(candidates[d].size());
    if (count > 100000) return "(one of them)";
  }
  std::vector<size_t> at(whole.size(), 0);
  for (int64_t k = 0; k < count; ++k) {
    std::vector<int64_t> point;
    for (size_t d = 0; d < whole.size(); ++d) point.push_back(candidates[d][at[d]]);
    bool covered = false;
    for (const Box& b : boxes) {
      bool inside = true;
      for (size_t d = 0; d < whole.size() && inside; ++d) {
        inside = b[d].begin <= point[d] && point[d] < b[d].end;
      }
      covered |= inside;
    }
    if (!covered) return absl::StrCat("[", absl::StrJoin(point, ","), "]");
    for (size_t d = 0; d < whole.size(); ++d) {
      if (++at[d] < candidates[d].size()) break;
      at[d] = 0;
    }
  }
  return "(one of them)";
}

}  // namespace loom::verify::derivation
