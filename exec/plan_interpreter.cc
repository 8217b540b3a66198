#include "exec/plan_interpreter.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "exec/host_ops.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using ir::Box;
using ir::Collective;
using ir::CollectiveKind;
using ir::HostTensor;
using ir::PlanStep;
using ir::PlanValue;
using ir::Task;
using ir::ValueId;

// ---------------------------------------------------------------------------
// The interpreter proper.

class PlanRunner {
 public:
  PlanRunner(const ir::Graph& spec, const ir::Plan& plan) : spec_(spec), plan_(plan) {}

  absl::Status CheckStructure();
  absl::Status InitInputs(const absl::flat_hash_map<ir::TensorId, HostTensor>& feeds);
  absl::Status RunDataflow();
  absl::Status RunOrdered();

  std::vector<HostTensor> TakeValues() {
    std::vector<HostTensor> out;
    out.reserve(values_.size());
    for (std::optional<HostTensor>& v : values_) out.push_back(std::move(*v));
    return out;
  }

 private:
  const std::vector<ValueId>& StepInputs(const PlanStep& s) const {
    return s.is_collective ? plan_.collectives[s.id].inputs : plan_.tasks[s.id].inputs;
  }
  std::string DescribeStep(const PlanStep& s) const {
    return s.is_collective ? DescribeCollective(plan_.collectives[s.id])
                           : DescribeTask(plan_.tasks[s.id]);
  }
  // The first input of `s` not yet computed, if any.
  std::optional<ValueId> MissingInput(const PlanStep& s) const {
    for (ValueId v : StepInputs(s)) {
      if (!values_[v].has_value()) return v;
    }
    return std::nullopt;
  }
  std::string DescribeWait(ValueId v) const;

  absl::Status CheckValue(const PlanValue& v, int index) const;
  absl::Status SetProducer(ValueId v, PlanStep step);
  absl::Status CheckOrder(std::vector<std::vector<int>>& member_count) const;
  absl::Status RunStep(const PlanStep& s) {
    return s.is_collective ? RunCollective(plan_.collectives[s.id]) : RunTask(plan_.tasks[s.id]);
  }
  absl::Status RunTask(const Task& t);
  absl::Status RunCollective(const Collective& c);
  absl::Status Store(ValueId id, HostTensor value, absl::string_view who);
  absl::Status Deadlock(const std::vector<size_t>& pc) const;

  const ir::Graph& spec_;
  const ir::Plan& plan_;
  std::vector<std::optional<HostTensor>> values_;
  std::vector<std::optional<PlanStep>> producer_;
};

absl::Status PlanRunner::CheckValue(const PlanValue& v, int index) const {
  if (v.id != index) {
    return PlanError(absl::StrCat("value at index ", index), absl::StrCat("has id ", v.id));
  }
  if (v.device < 0) return PlanError(DescribeValue(spec_, v), "negative device");
  if (v.sub.tensor < 0 || v.sub.tensor >= spec_.num_tensors()) {
    return PlanError(DescribeValue(spec_, v), "claims a tensor not in the spec");
  }
  const ir::Shape& shape = spec_.tensor(v.sub.tensor).shape;
  bool inside = static_cast<int>(v.sub.box.size()) == shape.rank();
  for (int i = 0; inside && i < shape.rank(); ++i) {
    const ir::Interval& iv = v.sub.box[i];
    inside = iv.begin >= 0 && iv.begin <= iv.end && iv.end <= shape.dim(i);
  }
  if (!inside) {
    return PlanError(DescribeValue(spec_, v),
                     absl::StrCat("box does not lie inside the tensor's shape ", shape.ToString()));
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::SetProducer(ValueId v, PlanStep step) {
  if (producer_[v].has_value()) {
    return PlanError(DescribeValue(spec_, plan_.values[v]),
                     absl::StrCat("produced twice, by ", DescribeStep(*producer_[v]), " and by ",
                                  DescribeStep(step)));
  }
  producer_[v] = step;
  return absl::OkStatus();
}

absl::Status PlanRunner::CheckStructure() {
  if (plan_.is_factored()) {
    return absl::InvalidArgumentError(
        "plan: the plan is factored; expand it with ir::ExpandPlan before running it");
  }
  const int num_values = static_cast<int>(plan_.values.size());
  for (int i = 0; i < num_values; ++i) LOOM_RETURN_IF_ERROR(CheckValue(plan_.values[i], i));
  values_.assign(num_values, std::nullopt);
  producer_.assign(num_values, std::nullopt);
  // `v` is a valid id and lives on `device`.
  auto check_use = [&](ValueId v, int64_t device, absl::string_view where,
                       absl::string_view what) -> absl::Status {
    if (v < 0 || v >= num_values) {
      return PlanError(where, absl::StrCat(what, " is value ", v, ", not in the plan"));
    }
    if (plan_.values[v].device != device) {
      return PlanError(where, absl::StrCat(what, " is ", DescribeValue(spec_, plan_.values[v]),
                                           ", which is not on device ", device));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < static_cast<int>(plan_.tasks.size()); ++i) {
    const Task& t = plan_.tasks[i];
    const std::string where = DescribeTask(t);
    if (t.id != i) return PlanError(absl::StrCat("task at index ", i), absl::StrCat("has id ", t.id));
    for (size_t k = 0; k < t.inputs.size(); ++k) {
      LOOM_RETURN_IF_ERROR(check_use(t.inputs[k], t.device, where, absl::StrCat("input ", k)));
    }
    for (size_t k = 0; k < t.outputs.size(); ++k) {
      LOOM_RETURN_IF_ERROR(check_use(t.outputs[k], t.device, where, absl::StrCat("output ", k)));
      LOOM_RETURN_IF_ERROR(SetProducer(t.outputs[k], PlanStep{false, i}));
    }
  }
  for (int i = 0; i < static_cast<int>(plan_.collectives.size()); ++i) {
    const Collective& c = plan_.collectives[i];
    const std::string where = DescribeCollective(c);
    if (c.id != i) {
      return PlanError(absl::StrCat("collective at index ", i), absl::StrCat("has id ", c.id));
    }
    if (c.devices.empty()) return PlanError(where, "empty device group");
    std::vector<int64_t> sorted = c.devices;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted[0] < 0) {
      return PlanError(where, "the device group repeats a device or has a negative one");
    }
    if (!CollectiveArityOk(c)) {
      return PlanError(where, absl::StrCat("has ", c.inputs.size(), " inputs and ",
                                           c.outputs.size(), " outputs for a group of ",
                                           c.devices.size()));
    }
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      LOOM_RETURN_IF_ERROR(
          check_use(c.inputs[k], CollectiveInputDevice(c, k), where, absl::StrCat("input ", k)));
    }
    for (size_t k = 0; k < c.outputs.size(); ++k) {
      LOOM_RETURN_IF_ERROR(
          check_use(c.outputs[k], CollectiveOutputDevice(c, k), where, absl::StrCat("output ", k)));
      LOOM_RETURN_IF_ERROR(SetProducer(c.outputs[k], PlanStep{true, i}));
    }
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::InitInputs(const absl::flat_hash_map<ir::TensorId, HostTensor>& feeds) {
  for (const PlanValue& v : plan_.values) {
    if (producer_[v.id].has_value()) continue;
    const ir::Tensor& tensor = spec_.tensor(v.sub.tensor);
    if (v.sub.part.IsEmpty()) {
      values_[v.id] = HostTensor(ir::Shape(ir::BoxDims(v.sub.box)), v.dtype);
      continue;
    }
    if (!v.sub.part.IsFull()) {
      return PlanError(DescribeValue(spec_, v),
                       "has no producer, so it is a plan input, but its part is neither full "
                       "nor empty");
    }
    auto it = feeds.find(v.sub.tensor);
    if (it == feeds.end()) {
      return PlanError(DescribeValue(spec_, v),
                       absl::StrCat("has no producer and no value is fed for tensor '",
                                    tensor.name, "'"));
    }
    if (!it->second.shape.SameDims(tensor.shape) ||
        it->second.size() != tensor.shape.num_elements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("value fed for '", tensor.name, "' has shape ",
                       it->second.shape.ToString(), ", expected ", tensor.shape.ToString()));
    }
    HostTensor slice = SliceBox(it->second, v.sub.box);
    slice.dtype = v.dtype;
    ScaleBy(slice, v.sub.scale);
    values_[v.id] = std::move(slice);
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::Store(ValueId id, HostTensor value, absl::string_view who) {
  const PlanValue& v = plan_.values[id];
  const std::vector<int64_t> box_dims = ir::BoxDims(v.sub.box);
  if (value.shape.dims() != box_dims) {
    return PlanError(who, absl::StrCat("computes shape ", value.shape.ToString(), " for ",
                                       DescribeValue(spec_, v), ", whose box has extents [",
                                       absl::StrJoin(box_dims, ","), "]"));
  }
  values_[id] = std::move(value);
  return absl::OkStatus();
}

absl::Status PlanRunner::RunTask(const Task& t) {
  const std::string who = DescribeTask(t);
  std::vector<const HostTensor*> in;
  std::vector<ir::TensorType> types;
  for (ValueId v : t.inputs) {
    in.push_back(&*values_[v]);
    types.push_back({values_[v]->shape, values_[v]->dtype});
  }
  absl::StatusOr<std::vector<ir::TensorType>> inferred =
      ir::InferOutputTypes(t.kind, types, t.attrs);
  if (!inferred.ok()) return PlanError(who, inferred.status().message());
  if (inferred->size() != t.outputs.size()) {
    return PlanError(who, absl::StrCat("has ", t.outputs.size(), " outputs, the op computes ",
                                       inferred->size()));
  }
  std::vector<HostTensor> out;
  for (const ir::TensorType& type : *inferred) out.emplace_back(type.shape, type.dtype);
  absl::Status s = ir::GetOpSchema(t.kind).kernel(in, t.attrs, absl::MakeSpan(out));
  if (!s.ok()) return PlanError(who, s.message());
  for (size_t i = 0; i < out.size(); ++i) {
    LOOM_RETURN_IF_ERROR(Store(t.outputs[i], std::move(out[i]), who));
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::RunCollective(const Collective& c) {
  const std::string who = DescribeCollective(c);
  std::vector<const HostTensor*> in;
  for (ValueId v : c.inputs) in.push_back(&*values_[v]);
  LOOM_ASSIGN_OR_RETURN(std::vector<HostTensor> out, CollectiveOutputs(c, in));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(Store(c.outputs[i], std::move(out[i]), who));
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::RunDataflow() {
  std::vector<PlanStep> steps;
  for (const Task& t : plan_.tasks) steps.push_back({false, t.id});
  for (const Collective& c : plan_.collectives) steps.push_back({true, c.id});
  std::vector<int> pending(steps.size(), 0);
  std::vector<std::vector<int>> consumers(plan_.values.size());
  std::deque<int> ready;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (ValueId v : StepInputs(steps[s])) {
      if (values_[v].has_value()) continue;
      ++pending[s];
      consumers[v].push_back(static_cast<int>(s));
    }
    if (pending[s] == 0) ready.push_back(static_cast<int>(s));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const PlanStep& step = steps[ready.front()];
    ready.pop_front();
    LOOM_RETURN_IF_ERROR(RunStep(step));
    ++done;
    const std::vector<ValueId>& outputs = step.is_collective
                                              ? plan_.collectives[step.id].outputs
                                              : plan_.tasks[step.id].outputs;
    for (ValueId v : outputs) {
      for (int s : consumers[v]) {
        if (--pending[s] == 0) ready.push_back(s);
      }
    }
  }
  if (done == steps.size()) return absl::OkStatus();
  std::vector<std::string> waits;
  for (size_t s = 0; s < steps.size() && waits.size() < 4; ++s) {
    if (pending[s] == 0) continue;
    waits.push_back(absl::StrCat(DescribeStep(steps[s]), " ",
                                 DescribeWait(*MissingInput(steps[s]))));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("plan: ", steps.size() - done,
                   " steps never become ready (their inputs depend on a cycle): ",
                   absl::StrJoin(waits, "; ")));
}

std::string PlanRunner::DescribeWait(ValueId v) const {
  return absl::StrCat("waits for ", DescribeValue(spec_, plan_.values[v]), ", produced by ",
                      DescribeStep(*producer_[v]));
}

absl::Status PlanRunner::CheckOrder(std::vector<std::vector<int>>& member_count) const {
  const int64_t num_devices = static_cast<int64_t>(plan_.order.size());
  std::vector<int> task_count(plan_.tasks.size(), 0);
  member_count.assign(plan_.collectives.size(), std::vector<int>());
  for (const Collective& c : plan_.collectives) member_count[c.id].assign(c.devices.size(), 0);
  for (int64_t d = 0; d < num_devices; ++d) {
    const std::string where = absl::StrCat("order of device ", d);
    for (const PlanStep& s : plan_.order[d]) {
      if (!s.is_collective) {
        if (s.id < 0 || s.id >= static_cast<int>(plan_.tasks.size())) {
          return PlanError(where, absl::StrCat("names task ", s.id, ", not in the plan"));
        }
        if (plan_.tasks[s.id].device != d) {
          return PlanError(where, absl::StrCat("lists ", DescribeTask(plan_.tasks[s.id])));
        }
        ++task_count[s.id];
        continue;
      }
      if (s.id < 0 || s.id >= static_cast<int>(plan_.collectives.size())) {
        return PlanError(where, absl::StrCat("names collective ", s.id, ", not in the plan"));
      }
      const Collective& c = plan_.collectives[s.id];
      auto it = std::find(c.devices.begin(), c.devices.end(), d);
      if (it == c.devices.end()) {
        return PlanError(where, absl::StrCat("lists ", DescribeCollective(c),
                                             ", which device ", d, " is not part of"));
      }
      ++member_count[c.id][it - c.devices.begin()];
    }
  }
  for (const Task& t : plan_.tasks) {
    if (task_count[t.id] != 1) {
      return PlanError(DescribeTask(t), absl::StrCat("appears ", task_count[t.id],
                                                     " times in its device's order, expected 1"));
    }
  }
  for (const Collective& c : plan_.collectives) {
    for (size_t k = 0; k < c.devices.size(); ++k) {
      if (member_count[c.id][k] != 1) {
        return PlanError(DescribeCollective(c),
                         absl::StrCat("appears ", member_count[c.id][k], " times in the order of ",
                                      "device ", c.devices[k], ", expected 1"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::RunOrdered() {
  std::vector<std::vector<int>> member_count;
  LOOM_RETURN_IF_ERROR(CheckOrder(member_count));
  const size_t num_devices = plan_.order.size();
  std::vector<size_t> pc(num_devices, 0);
  // Whether every member of collective `c` stands at it.
  auto all_arrived = [&](const Collective& c) {
    for (int64_t m : c.devices) {
      const std::vector<PlanStep>& prog = plan_.order[m];
      if (pc[m] >= prog.size() || !(prog[pc[m]] == PlanStep{true, c.id})) return false;
    }
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t d = 0; d < num_devices; ++d) {
      while (pc[d] < plan_.order[d].size()) {
        const PlanStep& s = plan_.order[d][pc[d]];
        if (MissingInput(s).has_value()) break;
        if (s.is_collective && !all_arrived(plan_.collectives[s.id])) break;
        LOOM_RETURN_IF_ERROR(RunStep(s));
        if (s.is_collective) {
          for (int64_t m : plan_.collectives[s.id].devices) ++pc[m];
        } else {
          ++pc[d];
        }
        progress = true;
      }
    }
  }
  for (size_t d = 0; d < num_devices; ++d) {
    if (pc[d] < plan_.order[d].size()) return Deadlock(pc);
  }
  return absl::OkStatus();
}

absl::Status PlanRunner::Deadlock(const std::vector<size_t>& pc) const {
  std::vector<std::string> blocked;
  for (size_t d = 0; d < pc.size(); ++d) {
    if (pc[d] >= plan_.order[d].size()) continue;
    const PlanStep& s = plan_.order[d][pc[d]];
    std::string line = absl::StrCat("device ", d, " waits at ", DescribeStep(s));
    if (std::optional<ValueId> v = MissingInput(s)) {
      absl::StrAppend(&line, ", which ", DescribeWait(*v));
    } else if (s.is_collective) {
      std::vector<std::string> absent;
      for (int64_t m : plan_.collectives[s.id].devices) {
        const std::vector<PlanStep>& prog = plan_.order[m];
        if (pc[m] < prog.size() && prog[pc[m]] == s) continue;
        absent.push_back(pc[m] < prog.size()
                             ? absl::StrCat("device ", m, " (at ", DescribeStep(prog[pc[m]]), ")")
                             : absl::StrCat("device ", m, " (finished)"));
      }
      absl::StrAppend(&line, ", not yet reached by ", absl::StrJoin(absent, ", "));
    }
    blocked.push_back(std::move(line));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "plan: deadlock in the device order: ", absl::StrJoin(blocked, "; ")));
}

}  // namespace

absl::StatusOr<std::vector<HostTensor>> RunPlan(
    const ir::Graph& spec, const ir::Plan& plan,
    const absl::flat_hash_map<ir::TensorId, HostTensor>& spec_feeds) {
  PlanRunner runner(spec, plan);
  LOOM_RETURN_IF_ERROR(runner.CheckStructure());
  LOOM_RETURN_IF_ERROR(runner.InitInputs(spec_feeds));
  if (plan.order.empty()) {
    LOOM_RETURN_IF_ERROR(runner.RunDataflow());
  } else {
    LOOM_RETURN_IF_ERROR(runner.RunOrdered());
  }
  return runner.TakeValues();
}

absl::StatusOr<NumericReport> CheckPlanNumerics(const ir::Graph& spec, const ir::Plan& plan,
                                                uint64_t seed) {
  std::optional<ir::Plan> expanded;
  if (plan.is_factored()) {
    LOOM_ASSIGN_OR_RETURN(expanded, ir::ExpandPlan(spec, plan));
  }
  const ir::Plan& run = expanded.has_value() ? *expanded : plan;

  absl::flat_hash_map<std::string, int64_t> int_bounds;
  if (std::optional<int64_t> vocab = SmallestVocabulary(spec)) {
    for (ir::TensorId id : spec.InputIds()) {
      if (!ir::IsFloat(spec.tensor(id).dtype)) int_bounds[spec.tensor(id).name] = *vocab;
    }
  }
  const absl::flat_hash_map<ir::TensorId, HostTensor> feeds =
      ir::RandomFeeds(spec, seed, /*scale=*/0.5, int_bounds);
  LOOM_ASSIGN_OR_RETURN(ir::TensorValues reference, ir::Evaluate(spec, feeds));
  LOOM_ASSIGN_OR_RETURN(std::vector<HostTensor> values, RunPlan(spec, run, feeds));

  // The largest magnitude of each role class over the whole reference.
  std::vector<double> class_scale(kNumRoleClasses, 0.0);
  for (const ir::Tensor& t : spec.tensors()) {
    LOOM_RET_CHECK(reference[t.id].has_value()) << t.name;
    double& m = class_scale[static_cast<int>(ClassOf(t.role))];
    m = std::max(m, MaxAbs(*reference[t.id]));
  }

  NumericReport report;
  double worst = -1.0;
  for (const PlanValue& v : run.values) {
    const bool full = v.sub.part.IsFull();
    if (!full && !v.sub.part.IsEmpty()) {
      ++report.values_partial;
      continue;
    }
    const ir::Tensor& tensor = spec.tensor(v.sub.tensor);
    const RoleClass role_class = ClassOf(tensor.role);
    HostTensor expected = SliceBox(*reference[tensor.id], v.sub.box);
    ScaleBy(expected, v.sub.scale);
    const HostTensor& got = values[v.id];
    const double scale = std::max(
        {MaxAbs(expected), kNoiseFloor * class_scale[static_cast<int>(role_class)], 1e-30});
    double err = full ? MaxDiff(got, expected)
                      : MaxDiff(got, HostTensor(expected.shape, expected.dtype));
    err /= scale;
    if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
    ++report.values_checked;
    report.max_rel_error_all = std::max(report.max_rel_error_all, err);
    switch (role_class) {
      case RoleClass::kLoss:
        report.max_rel_error_loss = std::max(report.max_rel_error_loss, err);
        break;
      case RoleClass::kGradient:
        report.max_rel_error_gradients = std::max(report.max_rel_error_gradients, err);
        break;
      case RoleClass::kParameter:
        report.max_rel_error_parameters = std::max(report.max_rel_error_parameters, err);
        break;
      case RoleClass::kOther:
        break;
    }
    if (err > worst) {
      worst = err;
      report.worst = absl::StrFormat("%s: rel error %.3g", DescribeValue(spec, v), err);
    }
  }
  return report;
}

}  // namespace loom::exec
