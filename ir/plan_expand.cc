// ExpandPlan: the explicit plan a factored plan stands for.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/plan.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using Int128 = __int128;

absl::Status FactoredError(absl::string_view where, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("plan: ", where, ": ", message));
}

// Expands a factored plan. Items are emitted replica-major: for r = 0..dp-1, every
// item of the factored plan in its order, a micro-batch-tagged item once per
// micro-batch m = 0..M-1 (consecutive), an untagged one once; a collective with
// spans_dp only while r == 0.
class Expander {
 public:
  Expander(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap)
      : spec_(spec),
        in_(plan),
        f_(*plan.factoring),
        mbmap_(mbmap),
        replicas_(plan.factoring->dp) {}

  absl::StatusOr<Plan> Run();

 private:
  int64_t Shift(int64_t device, int64_t r) const { return device + r * f_.dp_device_stride; }
  bool Tagged(ValueId v) const { return in_.values[v].microbatch == 0; }
  // Expanded id of value v in replica r and micro-batch m (m ignored if v is untagged).
  ValueId Val(ValueId v, int64_t r, int m) const {
    return first_[r * in_.values.size() + v] + (Tagged(v) ? m : 0);
  }
  absl::Status CheckIds(absl::Span<const ValueId> ids, absl::string_view where,
                        absl::string_view what) const;
  absl::Status CheckTag(int tag, absl::string_view where) const;
  absl::Status ExpandValues();
  absl::Status ExpandTasks();
  absl::Status ExpandCollectives();
  absl::Status ExpandOutputs();
  absl::Status ExpandOrder();

  const Graph& spec_;
  const Plan& in_;
  const Factoring& f_;
  const MicrobatchMap& mbmap_;
  const int64_t replicas_;  // dp
  Plan out_;
  std::vector<ValueId> first_;  // [r * num_values + v]: first expanded id
};

absl::Status Expander::CheckIds(absl::Span<const ValueId> ids, absl::string_view where,
                                absl::string_view what) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= static_cast<ValueId>(in_.values.size())) {
      return FactoredError(where, absl::StrCat(what, " ", i, ": unknown value id ", ids[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status Expander::CheckTag(int tag, absl::string_view where) const {
  if (tag != -1 && tag != 0) {
    return FactoredError(where, absl::StrCat("micro-batch ", tag,
                                             " in a factored plan (expected 0 or -1)"));
  }
  return absl::OkStatus();
}

absl::Status Expander::ExpandValues() {
  const int64_t nv = static_cast<int64_t>(in_.values.size());
  for (int64_t v = 0; v < nv; ++v) {
    const PlanValue& value = in_.values[v];
    const std::string where = absl::StrCat("value ", v);
    LOOM_RETURN_IF_ERROR(CheckTag(value.microbatch, where));
    if (value.dp_dim < -1 || value.dp_dim >= static_cast<int>(value.sub.box.size())) {
      return FactoredError(where, absl::StrCat("dp_dim ", value.dp_dim, " is not a dim of box ",
                                               BoxToString(value.sub.box)));
    }
    if (value.microbatch == 0 && mbmap_.Tensor(value.sub.tensor, 0) == kNoId) {
      return FactoredError(where, absl::StrCat("unknown tensor id ", value.sub.tensor));
    }
  }
  first_.resize(replicas_ * nv);
  for (int64_t r = 0; r < replicas_; ++r) {
    for (int64_t v = 0; v < nv; ++v) {
      const PlanValue& value = in_.values[v];
      first_[r * nv + v] = static_cast<ValueId>(out_.values.size());
      const int copies = value.microbatch == 0 ? f_.microbatches : 1;
      for (int m = 0; m < copies; ++m) {
        PlanValue e = ExpandedValue(in_, mbmap_, value, r, m);
        e.id = static_cast<ValueId>(out_.values.size());
        out_.values.push_back(std::move(e));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Expander::ExpandTasks() {
  for (const Task& task : in_.tasks) {
    const std::string where = absl::StrCat("task ", task.id);
    LOOM_RETURN_IF_ERROR(CheckTag(task.info.microbatch, where));
    LOOM_RETURN_IF_ERROR(CheckIds(task.inputs, where, "input"));
    LOOM_RETURN_IF_ERROR(CheckIds(task.outputs, where, "output"));
    for (ValueId v : task.outputs) {
      if (in_.values[v].microbatch != task.info.microbatch) {
        return FactoredError(where, absl::StrCat("output value ", v, " has micro-batch ",
                                                 in_.values[v].microbatch, ", the task ",
                                                 task.info.microbatch));
      }
    }
    if (task.op < kNoId || task.op >= spec_.num_ops()) {
      return FactoredError(where, absl::StrCat("unknown op id ", task.op));
    }
    for (const auto& [name, step] : task.dp_attr_steps) {
      auto value = task.attrs.GetInt(name);
      if (!value.ok()) {
        return FactoredError(where, absl::StrCat("dp_attrs names '", name,
                                                 "', which is not an integer attribute"));
      }
      const Int128 last = static_cast<Int128>(*value) + static_cast<Int128>(f_.dp - 1) * step;
      if (last > INT64_MAX || last < INT64_MIN) {
        return FactoredError(where, absl::StrCat("attribute '", name, "' overflows in the last "
                                                 "replica"));
      }
    }
  }
  for (int64_t r = 0; r < replicas_; ++r) {
    for (const Task& task : in_.tasks) {
      const bool tagged = task.info.microbatch == 0;
      for (int m = 0; m < (tagged ? f_.microbatches : 1); ++m) {
        Task e;
        e.op = task.op;
        e.kind = task.kind;
        e.info = task.info;
        e.stage = task.stage;
        e.recompute = task.recompute;
        e.id = static_cast<TaskId>(out_.tasks.size());
        e.device = Shift(task.device, r);
        e.attrs = ExpandedAttrs(task, r);
        if (tagged) {
          e.op = mbmap_.Op(task.op, m);
          e.info.microbatch = m;
          for (ValueId v : task.inputs) e.inputs.push_back(Val(v, r, m));
        } else {
          // An op outside the micro-batches reads every micro-batch's copy of a
          // micro-batch-0 value, in micro-batch order, in its place.
          for (ValueId v : task.inputs) {
            if (!Tagged(v)) {
              e.inputs.push_back(Val(v, r, 0));
              continue;
            }
            for (int k = 0; k < f_.microbatches; ++k) e.inputs.push_back(Val(v, r, k));
          }
        }
        for (ValueId v : task.outputs) e.outputs.push_back(Val(v, r, m));
        out_.tasks.push_back(std::move(e));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Expander::ExpandCollectives() {
  for (const Collective& c : in_.collectives) {
    const std::string where = absl::StrCat("collective ", c.id);
    LOOM_RETURN_IF_ERROR(CheckTag(c.microbatch, where));
    LOOM_RETURN_IF_ERROR(CheckIds(c.inputs, where, "input"));
    LOOM_RETURN_IF_ERROR(CheckIds(c.outputs, where, "output"));
    for (ValueId v : c.outputs) {
      if (in_.values[v].microbatch != c.microbatch) {
        return FactoredError(where, absl::StrCat("output value ", v, " has micro-batch ",
                                                 in_.values[v].microbatch, ", the collective ",
                                                 c.microbatch));
      }
    }
    for (ValueId v : c.inputs) {
      if (in_.values[v].microbatch == 0 && c.microbatch != 0) {
        return FactoredError(where, absl::StrCat("input value ", v,
                                                 " has micro-batch 0, the collective none"));
      }
    }
    if (c.spans_dp && c.kind == CollectiveKind::kSendRecv) {
      return FactoredError(where, "send_recv cannot span the data-parallel replicas");
    }
    if (c.spans_dp && c.kind == CollectiveKind::kBroadcast && c.inputs.size() != 1) {
      return FactoredError(where, absl::StrCat("broadcast has ", c.inputs.size(),
                                               " inputs, expected 1"));
    }
  }
  for (int64_t r = 0; r < replicas_; ++r) {
    for (const Collective& c : in_.collectives) {
      if (c.spans_dp && r > 0) continue;
      const bool tagged = c.microbatch == 0;
      for (int m = 0; m < (tagged ? f_.microbatches : 1); ++m) {
        Collective e = c;
        e.id = static_cast<CollectiveId>(out_.collectives.size());
        if (tagged) e.microbatch = m;
        e.spans_dp = false;
        e.devices.clear();
        e.inputs.clear();
        e.outputs.clear();
        if (!c.spans_dp) {
          for (int64_t d : c.devices) e.devices.push_back(Shift(d, r));
          for (ValueId v : c.inputs) e.inputs.push_back(Val(v, r, m));
          for (ValueId v : c.outputs) e.outputs.push_back(Val(v, r, m));
        } else {
          // Each unit position i becomes dp consecutive ranks i * dp + rr.
          for (int64_t d : c.devices) {
            for (int64_t rr = 0; rr < replicas_; ++rr) e.devices.push_back(Shift(d, rr));
          }
          if (c.kind == CollectiveKind::kBroadcast) {
            e.inputs.push_back(Val(c.inputs[0], 0, m));
          } else {
            for (ValueId v : c.inputs) {
              for (int64_t rr = 0; rr < replicas_; ++rr) e.inputs.push_back(Val(v, rr, m));
            }
          }
          for (ValueId v : c.outputs) {
            for (int64_t rr = 0; rr < replicas_; ++rr) e.outputs.push_back(Val(v, rr, m));
          }
        }
        out_.collectives.push_back(std::move(e));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Expander::ExpandOutputs() {
  LOOM_RETURN_IF_ERROR(CheckIds(in_.outputs, "outputs", "output"));
  for (int64_t r = 0; r < replicas_; ++r) {
    for (ValueId v : in_.outputs) {
      for (int m = 0; m < (Tagged(v) ? f_.microbatches : 1); ++m) {
        out_.outputs.push_back(Val(v, r, m));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Expander::ExpandOrder() {
  const FactoredOrder& order = in_.factored_order;
  if (order.programs.empty()) return absl::OkStatus();
  for (size_t k = 0; k < order.segments.size(); ++k) {
    for (const PlanStep& step : order.segments[k]) {
      const int64_t limit = step.is_collective ? in_.collectives.size() : in_.tasks.size();
      if (step.id < 0 || step.id >= limit) {
        return FactoredError(absl::StrCat("order segment ", k),
                             absl::StrCat("unknown ", step.is_collective ? "collective" : "task",
                                          " id ", step.id));
      }
    }
  }
  // A valid order lists each copy of a task once and each copy of a collective
  // once per unit member; a longer one is refused before it is expanded.
  int64_t steps_in_plan = 0;
  for (const Task& t : in_.tasks) steps_in_plan += t.info.microbatch == 0 ? f_.microbatches : 1;
  for (const Collective& c : in_.collectives) {
    steps_in_plan +=
        (c.microbatch == 0 ? f_.microbatches : 1) * static_cast<int64_t>(c.devices.size());
  }
  if (order.num_steps() > steps_in_plan) {
    return FactoredError("order", absl::StrCat("lists ", order.num_steps(),
                                               " steps, more than the plan's ", steps_in_plan,
                                               " task and collective copies"));
  }
  const int64_t unit = static_cast<int64_t>(order.programs.size());
  for (int64_t d = 0; d < unit; ++d) {
    for (size_t k = 0; k < order.programs[d].size(); ++k) {
      const OrderRun& run = order.programs[d][k];
      const std::string where = absl::StrCat("order[", d, "][", k, "]");
      if (run.segment < 0 || run.segment >= static_cast<int32_t>(order.segments.size())) {
        return FactoredError(where, absl::StrCat("unknown segment ", run.segment));
      }
      for (const PlanStep& step : order.segments[run.segment]) {
        const int tag = step.is_collective ? in_.collectives[step.id].microbatch
                                           : in_.tasks[step.id].info.microbatch;
        const bool ok = tag == 0 ? run.microbatch >= 0 && run.microbatch < f_.microbatches
                                 : run.microbatch == -1;
        if (!ok) {
          return FactoredError(
              where, absl::StrCat("micro-batch ", run.microbatch, " of ",
                                  tag == 0 ? "a tagged" : "an untagged", " item (expected ",
                                  tag == 0 ? absl::StrCat("0..", f_.microbatches - 1)
                                           : std::string("-1"),
                                  ")"));
        }
      }
    }
  }
  const ExpansionIds ids(in_);
  out_.order.assign(out_.mesh.num_devices(), {});
  for (int64_t r = 0; r < replicas_; ++r) {
    for (int64_t d = 0; d < unit; ++d) {
      std::vector<PlanStep>& program = out_.order[Shift(d, r)];
      for (const OrderRun& run : order.programs[d]) {
        const int m = std::max(run.microbatch, 0);
        for (const PlanStep& step : order.segments[run.segment]) {
          program.push_back(step.is_collective
                                ? PlanStep{true, ids.CollectiveCopy(step.id, r, m)}
                                : PlanStep{false, ids.TaskCopy(step.id, r, m)});
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> Expander::Run() {
  out_.model = in_.model;
  out_.step = in_.step;
  out_.mesh = in_.mesh;
  // Counts before allocating: ids are int32.
  auto count = [&](auto items, auto tagged) {
    int64_t n = 0;
    for (const auto& item : items) n += tagged(item) ? f_.microbatches : 1;
    return n * replicas_;
  };
  const int64_t values = count(absl::MakeConstSpan(in_.values),
                               [](const PlanValue& v) { return v.microbatch == 0; });
  const int64_t tasks = count(absl::MakeConstSpan(in_.tasks),
                              [](const Task& t) { return t.info.microbatch == 0; });
  const int64_t collectives = count(absl::MakeConstSpan(in_.collectives),
                                    [](const Collective& c) { return c.microbatch == 0; });
  if (std::max({values, tasks, collectives}) > INT32_MAX) {
    return FactoredError("factoring", absl::StrCat("the explicit plan would have ", values,
                                                   " values, ", tasks, " tasks and ",
                                                   collectives, " collectives, more than ids hold"));
  }
  out_.values.reserve(values);
  out_.tasks.reserve(tasks);
  LOOM_RETURN_IF_ERROR(ExpandValues());
  LOOM_RETURN_IF_ERROR(ExpandTasks());
  LOOM_RETURN_IF_ERROR(ExpandCollectives());
  LOOM_RETURN_IF_ERROR(ExpandOutputs());
  LOOM_RETURN_IF_ERROR(ExpandOrder());
  return std::move(out_);
}

}  // namespace

PlanValue ExpandedValue(const Plan& plan, const MicrobatchMap& mbmap, const PlanValue& value,
                        int64_t r, int m) {
  PlanValue e = value;
  if (!plan.is_factored()) return e;
  const Factoring& f = *plan.factoring;
  e.device = value.device + r * f.dp_device_stride;
  if (value.microbatch == 0) {
    e.sub.tensor = mbmap.Tensor(value.sub.tensor, m);
    e.microbatch = m;
  }
  if (value.dp_dim >= 0 && value.dp_dim < static_cast<int>(e.sub.box.size())) {
    Interval& iv = e.sub.box[value.dp_dim];
    const int64_t offset = r * iv.size();
    iv.begin += offset;
    iv.end += offset;
  }
  if (value.dp_share) e.sub.part = e.sub.part.Share(r, f.dp);
  e.dp_dim = -1;
  e.dp_share = false;
  return e;
}

AttrMap ExpandedAttrs(const Task& task, int64_t r) {
  AttrMap attrs = task.attrs;
  for (const auto& [name, step] : task.dp_attr_steps) {
    auto value = task.attrs.GetInt(name);
    if (value.ok()) attrs.Set(name, *value + r * step);
  }
  return attrs;
}

absl::Status ValidateFactoring(const Plan& plan, const MicrobatchMap& mbmap) {
  if (!plan.is_factored()) return absl::OkStatus();
  const Factoring& f = *plan.factoring;
  int64_t devices = 1;
  for (const MeshAxis& a : plan.mesh.axes()) {
    if (a.size < 1 || a.size > (int64_t{1} << 31) || devices * a.size > (int64_t{1} << 31)) {
      return FactoredError("mesh", absl::StrCat("axis '", a.name, "' has size ", a.size,
                                                " (expected 1..2^31 devices in all)"));
    }
    devices *= a.size;
  }
  if (f.dp < 1) return FactoredError("factoring", absl::StrCat("dp is ", f.dp, ", expected >= 1"));
  if (f.microbatches != mbmap.microbatches()) {
    return FactoredError("factoring",
                         absl::StrCat("micro-batches is ", f.microbatches, ", the spec has ",
                                      mbmap.microbatches()));
  }
  if (f.dp > 1 && (f.dp_device_stride < 1 || f.dp_device_stride > devices / f.dp)) {
    return FactoredError("factoring",
                         absl::StrCat("dp_device_stride ", f.dp_device_stride, " with dp ", f.dp,
                                      " does not fit the ", devices, " devices of mesh ",
                                      plan.mesh.ToString()));
  }
  const int64_t unit = f.dp > 1 ? f.dp_device_stride : devices;
  if (!plan.order.empty()) {
    return FactoredError("order", "a factored plan's order is its factored_order (one program "
                                  "per unit device), not a per-device order");
  }
  const std::vector<std::vector<OrderRun>>& programs = plan.factored_order.programs;
  if (!programs.empty() && static_cast<int64_t>(programs.size()) != unit) {
    return FactoredError("order", absl::StrCat("has ", programs.size(),
                                               " device programs, the scale unit ", unit,
                                               " devices (one program per unit device)"));
  }
  return absl::OkStatus();
}

ExpansionIds::ExpansionIds(const Plan& plan) {
  const int microbatches = plan.is_factored() ? plan.factoring->microbatches : 1;
  for (const Task& t : plan.tasks) {
    const bool tagged = t.info.microbatch == 0;
    task_first_.push_back(static_cast<int32_t>(tasks_per_replica_));
    task_tagged_.push_back(tagged);
    tasks_per_replica_ += tagged ? microbatches : 1;
  }
  for (const Collective& c : plan.collectives) {
    const bool tagged = c.microbatch == 0;
    const int copies = tagged ? microbatches : 1;
    collective_first_.push_back(static_cast<int32_t>(collectives_in_replica0_));
    collective_tagged_.push_back(tagged);
    collective_later_.push_back(
        c.spans_dp ? -1 : static_cast<int32_t>(collectives_per_later_replica_));
    collectives_in_replica0_ += copies;
    if (!c.spans_dp) collectives_per_later_replica_ += copies;
  }
}

TaskId ExpansionIds::TaskCopy(TaskId t, int64_t r, int m) const {
  return static_cast<TaskId>(r * tasks_per_replica_ + task_first_[t] + (task_tagged_[t] ? m : 0));
}

CollectiveId ExpansionIds::CollectiveCopy(CollectiveId c, int64_t r, int m) const {
  const int offset = collective_tagged_[c] ? m : 0;
  if (r == 0 || collective_later_[c] < 0) {
    return static_cast<CollectiveId>(collective_first_[c] + offset);
  }
  return static_cast<CollectiveId>(collectives_in_replica0_ +
                                   (r - 1) * collectives_per_later_replica_ +
                                   collective_later_[c] + offset);
}

absl::StatusOr<Plan> ExpandPlan(const Graph& spec, const Plan& plan) {
  if (!plan.is_factored()) return plan;
  auto mbmap = MicrobatchMap::Build(spec);
  if (!mbmap.ok()) {
    return absl::Status(mbmap.status().code(),
                        absl::StrCat("plan: spec: ", mbmap.status().message()));
  }
  LOOM_RETURN_IF_ERROR(ValidateFactoring(plan, *mbmap));
  Expander expander(spec, plan, *mbmap);
  return expander.Run();
}

}  // namespace loom::ir
