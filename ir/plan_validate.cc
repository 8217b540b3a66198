// ValidatePlan: structural checks of a plan against its spec.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/collective_semantics.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

std::string TypeString(const Shape& shape, DType dtype) {
  return TensorType{shape, dtype}.ToString();
}

class Validator {
 public:
  Validator(const Graph& spec, const Plan& plan, const MicrobatchMap* mbmap = nullptr)
      : spec_(spec), plan_(plan), mbmap_(mbmap) {}

  // The structure, the types (leaving out what `implied` marks), or both.
  absl::Status Run(bool structure, bool types, const ImpliedTypes& implied = {});

 private:
  // The place of an item, written out only when an error names it.
  // Written out only when an error names it: a reference to a callable that lives
  // in the checking function's frame.
  using Where = absl::FunctionRef<std::string()>;
  template <typename... Args>
  absl::Status Error(absl::string_view where, const Args&... message) const {
    return absl::InvalidArgumentError(absl::StrCat("plan: ", where, ": ", message...));
  }
  template <typename... Args>
  absl::Status Error(const Where& where, const Args&... message) const {
    return Error(absl::string_view(where()), message...);
  }
  std::string ValueWhere(int i) const;
  std::string TaskWhere(int i) const;
  std::string CollectiveWhere(int i) const;
  std::string ValueType(ValueId v) const {
    return TypeString(ValueShape(plan_.values[v]), plan_.values[v].dtype);
  }
  bool ValidValue(ValueId v) const {
    return v >= 0 && v < static_cast<ValueId>(plan_.values.size());
  }
  // Whether `device` may hold items of this plan (else DeviceProblem says why not),
  // and likewise for micro-batch tags.
  bool DeviceOk(int64_t device) const;
  bool MicrobatchOk(int microbatch) const;
  std::string DeviceProblem(int64_t device) const;
  std::string MicrobatchProblem(int microbatch) const;
  absl::Status SetProducer(ValueId v, PlanStep step, const Where& where);

  absl::Status CheckMesh();
  absl::Status CheckValue(int i) const;
  absl::Status CheckValueTypes(int i) const;
  absl::Status CheckTask(int i);
  absl::Status CheckTaskAgainstOp(int i);
  absl::Status CheckTaskTypes(const Task& task, const Where& where);
  absl::Status InferTaskTypes(const Task& task, const Where& where) const;
  absl::Status CheckCollective(int i);
  absl::Status CheckCollectiveTypes(const Collective& c, const Where& where) const;
  absl::Status CheckOrder() const;

  const Graph& spec_;
  const Plan& plan_;
  const MicrobatchMap* mbmap_;  // given, or owned_mbmap_
  MicrobatchMap owned_mbmap_;
  int64_t num_devices_ = 1;
  int64_t dp_ = 1;  // factored plans: replicas of the unit
  std::vector<PlanStep> producer_;  // by value; id kNoId = not produced
  // Kinds, attributes and value shapes whose type inference passed. The
  // attributes are the plan's own (they outlive the validator).
  struct TypeKey {
    OpKind kind = OpKind::kAdd;
    const AttrMap* attrs = nullptr;
    std::vector<int64_t> dims;
    bool operator==(const TypeKey& o) const {
      return kind == o.kind && dims == o.dims && *attrs == *o.attrs;
    }
    template <typename H>
    friend H AbslHashValue(H h, const TypeKey& k) {
      return H::combine(std::move(h), static_cast<int>(k.kind), k.dims, k.attrs->values().size());
    }
  };
  absl::flat_hash_set<TypeKey> checked_types_;
  TypeKey type_key_;  // scratch, reused from task to task
  TypeKey last_key_;  // the last task's, when its types passed
};

std::string Validator::ValueWhere(int i) const {
  const PlanValue& v = plan_.values[i];
  std::string mb = v.microbatch >= 0 ? absl::StrCat(", micro-batch ", v.microbatch) : "";
  return absl::StrCat("value ", i, " (device ", v.device, mb, ")");
}

std::string Validator::TaskWhere(int i) const {
  const Task& t = plan_.tasks[i];
  std::string mb = t.info.microbatch >= 0 ? absl::StrCat(", micro-batch ", t.info.microbatch) : "";
  return absl::StrCat("task ", i, " '", OpKindName(t.kind), "' (device ", t.device, mb, ")");
}

std::string Validator::CollectiveWhere(int i) const {
  const Collective& c = plan_.collectives[i];
  std::string mb = c.microbatch >= 0 ? absl::StrCat(", micro-batch ", c.microbatch) : "";
  return absl::StrCat("collective ", i, " '", CollectiveKindName(c.kind), "' (devices [",
                      absl::StrJoin(c.devices, ","), "]", mb, ")");
}

bool Validator::DeviceOk(int64_t device) const {
  const int64_t limit =
      plan_.is_factored() && dp_ > 1 ? plan_.factoring->dp_device_stride : num_devices_;
  return device >= 0 && device < limit;
}

bool Validator::MicrobatchOk(int microbatch) const {
  if (plan_.is_factored()) return microbatch == -1 || microbatch == 0;
  return microbatch >= -1 && microbatch < mbmap_->microbatches();
}

std::string Validator::DeviceProblem(int64_t device) const {
  if (plan_.is_factored() && dp_ > 1) {
    const int64_t stride = plan_.factoring->dp_device_stride;
    if (device < 0 || device >= stride) {
      return absl::StrCat("device ", device, " is outside the scale unit (devices 0..",
                          stride - 1, ")");
    }
    return "";
  }
  if (device < 0 || device >= num_devices_) {
    return absl::StrCat("device ", device, " is outside the mesh ", plan_.mesh.ToString(), " (",
                        num_devices_, " devices)");
  }
  return "";
}

std::string Validator::MicrobatchProblem(int microbatch) const {
  if (plan_.is_factored()) {
    if (microbatch != -1 && microbatch != 0) {
      return absl::StrCat("micro-batch ", microbatch, " in a factored plan (expected 0 or -1)");
    }
    return "";
  }
  if (microbatch < -1 || microbatch >= mbmap_->microbatches()) {
    return absl::StrCat("micro-batch ", microbatch, " is outside the spec's ",
                        mbmap_->microbatches(), " micro-batches");
  }
  return "";
}

absl::Status Validator::SetProducer(ValueId v, PlanStep step, const Where& where) {
  PlanStep& p = producer_[v];
  if (p.id != kNoId) {
    return Error(where, "value ", v, " is also written by ",
                 p.is_collective ? "collective " : "task ", p.id);
  }
  p = step;
  return absl::OkStatus();
}

absl::Status Validator::CheckMesh() {
  constexpr int64_t kMaxDevices = int64_t{1} << 31;
  int64_t n = 1;
  for (const MeshAxis& a : plan_.mesh.axes()) {
    if (a.size < 1) return Error("mesh", "axis '", a.name, "' has size ", a.size);
    if (a.size > kMaxDevices || n * a.size > kMaxDevices) {
      return Error("mesh", plan_.mesh.ToString(), " has more than ", kMaxDevices, " devices");
    }
    n *= a.size;
  }
  num_devices_ = n;
  return absl::OkStatus();
}

absl::Status Validator::CheckValue(int i) const {
  const PlanValue& v = plan_.values[i];
  const auto where_text = [this, i] { return ValueWhere(i); };
  const Where where = where_text;
  if (v.id != i) {
    return Error(where, "id is ", v.id, ", expected ", i, " (value ids are dense and in order)");
  }
  if (!DeviceOk(v.device)) return Error(where, DeviceProblem(v.device));
  if (!MicrobatchOk(v.microbatch)) return Error(where, MicrobatchProblem(v.microbatch));
  if (v.sub.tensor < 0 || v.sub.tensor >= spec_.num_tensors()) {
    return Error(where, "unknown tensor id ", v.sub.tensor);
  }
  if (!plan_.is_factored() && (v.dp_dim != -1 || v.dp_share)) {
    return Error(where, "dp_dim / dp_share are set in an explicit plan");
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckValueTypes(int i) const {
  const PlanValue& v = plan_.values[i];
  const auto where_text = [this, i] { return ValueWhere(i); };
  const Where where = where_text;
  const Tensor& t = spec_.tensor(v.sub.tensor);
  auto tensor = [&t] { return absl::StrCat("tensor '", t.name, "' ", t.type().ToString()); };
  if (static_cast<int>(v.sub.box.size()) != t.shape.rank()) {
    return Error(where, "box ", BoxToString(v.sub.box), " has ", v.sub.box.size(), " dims, ",
                 tensor(), " has ", t.shape.rank());
  }
  for (int d = 0; d < t.shape.rank(); ++d) {
    const Interval& iv = v.sub.box[d];
    if (iv.begin < 0 || iv.begin > iv.end || iv.end > t.shape.dim(d)) {
      return Error(where, "box ", BoxToString(v.sub.box), " lies outside ", tensor(), " in dim ",
                   d);
    }
  }
  const int tensor_mb = mbmap_->TensorMicrobatch(v.sub.tensor);
  if (tensor_mb >= 0 && v.microbatch != tensor_mb) {
    return Error(where, tensor(), " belongs to micro-batch ", tensor_mb, ", the value to ",
                 v.microbatch);
  }
  if (!plan_.is_factored()) return absl::OkStatus();
  if (v.dp_dim < -1 || v.dp_dim >= t.shape.rank()) {
    return Error(where, "dp_dim ", v.dp_dim, " is not a dim of ", tensor());
  }
  if (v.dp_dim >= 0) {
    const Interval& iv = v.sub.box[v.dp_dim];
    const __int128 last_end = static_cast<__int128>(iv.end) +
                              static_cast<__int128>(dp_ - 1) * iv.size();
    if (last_end > t.shape.dim(v.dp_dim)) {
      return Error(where, "box ", BoxToString(v.sub.box), " shifted along dim ", v.dp_dim,
                   " for ", dp_, " replicas leaves ", tensor());
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckTask(int i) {
  const Task& task = plan_.tasks[i];
  const auto where_text = [this, i] { return TaskWhere(i); };
  const Where where = where_text;
  if (task.id != i) {
    return Error(where, "id is ", task.id, ", expected ", i, " (task ids are dense and in order)");
  }
  if (!DeviceOk(task.device)) return Error(where, DeviceProblem(task.device));
  if (!MicrobatchOk(task.info.microbatch)) {
    return Error(where, MicrobatchProblem(task.info.microbatch));
  }
  if (task.stage < -1) return Error(where, "stage ", task.stage, " (expected >= -1)");
  if (task.op < kNoId || task.op >= spec_.num_ops()) {
    return Error(where, "unknown op id ", task.op);
  }
  if (!plan_.is_factored() && !task.dp_attr_steps.empty()) {
    return Error(where, "dp_attrs are set in an explicit plan");
  }
  for (const auto& [name, step] : task.dp_attr_steps) {
    if (!task.attrs.GetInt(name).ok()) {
      return Error(where, "dp_attrs names '", name, "', which is not an integer attribute");
    }
  }
  for (size_t k = 0; k < task.inputs.size(); ++k) {
    const ValueId v = task.inputs[k];
    if (!ValidValue(v)) return Error(where, "input ", k, ": unknown value id ", v);
    const PlanValue& value = plan_.values[v];
    if (value.device != task.device) {
      return Error(where, "input ", k, ": value ", v, " is on device ", value.device);
    }
  }
  for (size_t k = 0; k < task.outputs.size(); ++k) {
    const ValueId v = task.outputs[k];
    if (!ValidValue(v)) return Error(where, "output ", k, ": unknown value id ", v);
    const PlanValue& value = plan_.values[v];
    if (value.device != task.device) {
      return Error(where, "output ", k, ": value ", v, " is on device ", value.device);
    }
    if (plan_.is_factored() && value.microbatch != task.info.microbatch) {
      return Error(where, "output ", k, ": value ", v, " has micro-batch ", value.microbatch);
    }
    LOOM_RETURN_IF_ERROR(SetProducer(v, PlanStep{false, i}, where));
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckTaskAgainstOp(int i) {
  const Task& task = plan_.tasks[i];
  const auto where_text = [this, i] { return TaskWhere(i); };
  const Where where = where_text;
  if (task.op != kNoId) {
    const Op& op = spec_.op(task.op);
    auto desc = [&] { return DescribeOp(spec_, op); };
    if (op.kind != task.kind) return Error(where, "computes a piece of ", desc());
    if (op.info.microbatch != task.info.microbatch) {
      return Error(where, "computes a piece of ", desc(), " of micro-batch ", op.info.microbatch);
    }
    if (task.outputs.size() != op.outputs.size()) {
      return Error(where, "has ", task.outputs.size(), " outputs, ", desc(), " has ",
                   op.outputs.size());
    }
    for (size_t k = 0; k < task.outputs.size(); ++k) {
      const TensorId claimed = plan_.values[task.outputs[k]].sub.tensor;
      if (claimed != op.outputs[k]) {
        return Error(where, "output ", k, ": value ", task.outputs[k], " claims tensor '",
                     spec_.tensor(claimed).name, "', ", desc(), " writes '",
                     spec_.tensor(op.outputs[k]).name, "'");
      }
    }
  }
  return CheckTaskTypes(task, where);
}

absl::Status Validator::CheckTaskTypes(const Task& task, const Where& where) {
  // Tasks of alike layers repeat one another's kinds, attributes and shapes: each
  // distinct combination is inferred once (compared in full, not by hash).
  TypeKey& key = type_key_;
  if (task.dp_attr_steps.empty()) {
    key.kind = task.kind;
    key.attrs = &task.attrs;
    key.dims.clear();
    auto put = [&](ValueId v, int64_t copies) {
      const PlanValue& value = plan_.values[v];
      key.dims.push_back(static_cast<int64_t>(value.dtype));
      key.dims.push_back(copies);
      key.dims.push_back(static_cast<int64_t>(value.sub.box.size()));
      for (const Interval& iv : value.sub.box) key.dims.push_back(iv.size());
    };
    for (ValueId v : task.inputs) {
      const PlanValue& value = plan_.values[v];
      put(v, plan_.is_factored() && task.info.microbatch == -1 && value.microbatch == 0
                 ? mbmap_->microbatches()
                 : 1);
    }
    key.dims.push_back(-1);
    for (ValueId v : task.outputs) put(v, 1);
    // The tensor-parallel pieces of an op follow one another: most tasks repeat
    // the previous one's types.
    if (last_key_.attrs != nullptr && key == last_key_) return absl::OkStatus();
    if (checked_types_.contains(key)) {
      last_key_ = key;
      return absl::OkStatus();
    }
  }
  LOOM_RETURN_IF_ERROR(InferTaskTypes(task, where));
  if (task.dp_attr_steps.empty()) {
    checked_types_.insert(key);
    last_key_ = key;
  }
  return absl::OkStatus();
}

absl::Status Validator::InferTaskTypes(const Task& task, const Where& where) const {
  std::vector<TensorType> in;
  // An untagged task of a factored plan reads every micro-batch's copy.
  auto copies = [&](const PlanValue& value) {
    return plan_.is_factored() && task.info.microbatch == -1 && value.microbatch == 0
               ? mbmap_->microbatches()
               : 1;
  };
  for (ValueId v : task.inputs) {
    const PlanValue& value = plan_.values[v];
    TensorType type{ValueShape(value), value.dtype};
    const int n = copies(value);
    for (int m = 0; m < n; ++m) in.push_back(type);
  }
  auto described = [&] {
    std::vector<std::string> out;
    for (ValueId v : task.inputs) {
      const PlanValue& value = plan_.values[v];
      const int n = copies(value);
      out.push_back(absl::StrCat("value ", v, " ", ValueType(v),
                                 n > 1 ? absl::StrCat(" x ", n, " micro-batches") : ""));
    }
    return out;
  };
  // Attributes stepping with the replica are linear in r: replicas 0 and dp-1 bound
  // every other.
  std::vector<std::pair<std::string, AttrMap>> variants = {{"", task.attrs}};
  if (!task.dp_attr_steps.empty() && dp_ > 1) {
    AttrMap last = task.attrs;
    for (const auto& [name, step] : task.dp_attr_steps) {
      const __int128 v = static_cast<__int128>(*task.attrs.GetInt(name)) +
                         static_cast<__int128>(dp_ - 1) * step;
      if (v > INT64_MAX || v < INT64_MIN) {
        return Error(where, "attribute '", name, "' overflows in replica ", dp_ - 1);
      }
      last.Set(name, static_cast<int64_t>(v));
    }
    std::string prefix = absl::StrCat("in replica ", dp_ - 1, " ", last.ToString(), ": ");
    variants.push_back({std::move(prefix), std::move(last)});
  }
  for (const auto& [prefix, attrs] : variants) {
    auto out = InferOutputTypes(task.kind, in, attrs);
    if (!out.ok()) {
      return Error(where, prefix, out.status().message(), " (inputs: ",
                   absl::StrJoin(described(), ", "), ")");
    }
    if (out->size() != task.outputs.size()) {
      return Error(where, prefix, "has ", task.outputs.size(), " outputs, '",
                   OpKindName(task.kind), "' infers ", out->size());
    }
    for (size_t k = 0; k < out->size(); ++k) {
      const PlanValue& value = plan_.values[task.outputs[k]];
      const TensorType& want = (*out)[k];
      if (!want.shape.SameDims(ValueShape(value)) || want.dtype != value.dtype) {
        return Error(where, prefix, "output ", k, ": value ", value.id, " is ",
                     ValueType(value.id), ", '", OpKindName(task.kind), "' infers ",
                     want.ToString());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckCollective(int i) {
  const Collective& c = plan_.collectives[i];
  const auto where_text = [this, i] { return CollectiveWhere(i); };
  const Where where = where_text;
  if (c.id != i) {
    return Error(where, "id is ", c.id, ", expected ", i,
                 " (collective ids are dense and in order)");
  }
  if (!MicrobatchOk(c.microbatch)) return Error(where, MicrobatchProblem(c.microbatch));
  if (c.devices.empty()) return Error(where, "has no devices");
  for (int64_t d : c.devices) {
    if (!DeviceOk(d)) return Error(where, DeviceProblem(d));
  }
  absl::InlinedVector<int64_t, 16> sorted(c.devices.begin(), c.devices.end());
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return Error(where, "lists device ", *twice, " twice");
  }
  if (c.spans_dp && !plan_.is_factored()) {
    return Error(where, "spans_dp is set in an explicit plan");
  }
  if (c.spans_dp && c.kind == CollectiveKind::kSendRecv) {
    return Error(where, "send_recv cannot span the data-parallel replicas");
  }
  const size_t n = c.devices.size();
  size_t want_inputs = n, want_outputs = n;
  if (c.kind == CollectiveKind::kSendRecv) {
    if (n != 2) return Error(where, "send_recv needs 2 devices {src, dst}, has ", n);
    want_inputs = want_outputs = 1;
  } else if (c.kind == CollectiveKind::kBroadcast) {
    want_inputs = 1;
  }
  if (c.inputs.size() != want_inputs || c.outputs.size() != want_outputs) {
    return Error(where, "has ", c.inputs.size(), " inputs and ", c.outputs.size(),
                 " outputs, expected ", want_inputs, " and ", want_outputs);
  }
  // Device of input / output k.
  auto input_device = [&](size_t k) { return c.devices[k]; };
  auto output_device = [&](size_t k) {
    return c.kind == CollectiveKind::kSendRecv ? c.devices[1] : c.devices[k];
  };
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const ValueId v = c.inputs[k];
    if (!ValidValue(v)) return Error(where, "input ", k, ": unknown value id ", v);
    const PlanValue& value = plan_.values[v];
    if (value.device != input_device(k)) {
      return Error(where, "input ", k, ": value ", v, " is on device ", value.device,
                   ", expected ", input_device(k));
    }
    if (plan_.is_factored() && value.microbatch == 0 && c.microbatch != 0) {
      return Error(where, "input ", k, ": value ", v, " belongs to micro-batch 0");
    }
  }
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const ValueId v = c.outputs[k];
    if (!ValidValue(v)) return Error(where, "output ", k, ": unknown value id ", v);
    const PlanValue& value = plan_.values[v];
    if (value.device != output_device(k)) {
      return Error(where, "output ", k, ": value ", v, " is on device ", value.device,
                   ", expected ", output_device(k));
    }
    if (plan_.is_factored() && value.microbatch != c.microbatch) {
      return Error(where, "output ", k, ": value ", v, " has micro-batch ", value.microbatch);
    }
    LOOM_RETURN_IF_ERROR(SetProducer(v, PlanStep{true, i}, where));
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckCollectiveTypes(const Collective& c, const Where& where) const {
  const PlanValue& first = plan_.values[c.inputs[0]];
  const Shape in_shape = ValueShape(first);
  for (size_t k = 1; k < c.inputs.size(); ++k) {
    const PlanValue& value = plan_.values[c.inputs[k]];
    if (!ValueShape(value).SameDims(in_shape) || value.dtype != first.dtype) {
      return Error(where, "input ", k, ": value ", value.id, " is ", ValueType(value.id),
                   ", input 0 is ", ValueType(first.id));
    }
  }
  // Ranks after expansion.
  const int64_t n = static_cast<int64_t>(c.devices.size()) * (c.spans_dp ? dp_ : 1);
  absl::StatusOr<CollectiveMeaning> meaning = MeaningOf(c, in_shape.dims(), n);
  if (!meaning.ok()) return Error(where, meaning.status().message());
  const std::vector<int64_t>& out_dims = meaning->output_dims;
  const Shape want(out_dims);
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const PlanValue& value = plan_.values[c.outputs[k]];
    if (!ValueShape(value).SameDims(want) || value.dtype != first.dtype) {
      return Error(where, "output ", k, ": value ", value.id, " is ", ValueType(value.id),
                   ", expected ", TypeString(want, first.dtype));
    }
  }
  return absl::OkStatus();
}

// Checks each device's program: every task (every copy of a tagged task, in a
// factored plan) once on its own device's list, every collective (copy) once on
// each member's list.
absl::Status Validator::CheckOrder() const {
  const bool factored = plan_.is_factored();
  const FactoredOrder& runs = plan_.factored_order;
  if (!factored && !runs.programs.empty()) {
    return Error("order", "an explicit plan has a factored order (segments and runs)");
  }
  if (factored && !plan_.order.empty()) {
    return Error("order", "a factored plan's order is written in segments and runs");
  }
  const int64_t listed = factored ? static_cast<int64_t>(runs.programs.size())
                                  : static_cast<int64_t>(plan_.order.size());
  if (listed == 0) return absl::OkStatus();
  const int64_t programs = factored && dp_ > 1 ? plan_.factoring->dp_device_stride : num_devices_;
  if (listed != programs) {
    return Error("order", "has ", listed, " device lists, ",
                 factored ? "the scale unit has " : "the mesh has ", programs, " devices");
  }
  if (factored) {
    for (size_t k = 0; k < runs.segments.size(); ++k) {
      for (const PlanStep& s : runs.segments[k]) {
        const int64_t limit = s.is_collective ? static_cast<int64_t>(plan_.collectives.size())
                                              : static_cast<int64_t>(plan_.tasks.size());
        if (s.id < 0 || s.id >= limit) {
          return Error(absl::StrCat("order segment ", k), "unknown ",
                       s.is_collective ? "collective" : "task", " id ", s.id);
        }
      }
    }
  }
  const int copies = factored ? plan_.factoring->microbatches : 1;
  auto copies_of = [&](int tag) { return factored && tag == 0 ? copies : 1; };
  // Seen counts per item copy: item i's copy m at first_[i] + m.
  std::vector<int64_t> task_first(plan_.tasks.size() + 1, 0);
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    task_first[t + 1] = task_first[t] + copies_of(plan_.tasks[t].info.microbatch);
  }
  std::vector<int64_t> collective_first(plan_.collectives.size() + 1, 0);
  for (size_t c = 0; c < plan_.collectives.size(); ++c) {
    collective_first[c + 1] = collective_first[c] + copies_of(plan_.collectives[c].microbatch);
  }
  std::vector<char> task_seen(task_first.back(), 0);
  std::vector<int64_t> collective_seen(collective_first.back(), 0);
  std::vector<int64_t> last_device(collective_first.back(), -1);
  auto copy_name = [&](const PlanStep& s) {
    return factored && s.microbatch >= 0 ? absl::StrCat(" (micro-batch ", s.microbatch, ")")
                                         : std::string();
  };
  // One step of device d's program; `where` names it.
  auto check = [&](int64_t d, const PlanStep& s, const auto& where) -> absl::Status {
    const int64_t limit = s.is_collective ? static_cast<int64_t>(plan_.collectives.size())
                                          : static_cast<int64_t>(plan_.tasks.size());
    if (s.id < 0 || s.id >= limit) {
      return Error(where(), "unknown ", s.is_collective ? "collective" : "task", " id ", s.id);
    }
    const int tag = s.is_collective ? plan_.collectives[s.id].microbatch
                                    : plan_.tasks[s.id].info.microbatch;
    const int n = copies_of(tag);
    if (!factored && s.microbatch != -1) {
      return Error(where(), "names micro-batch copy ", s.microbatch,
                   " in an explicit plan (only a factored plan's order names copies)");
    }
    const bool copy_ok = tag == 0 ? s.microbatch >= 0 && s.microbatch < n : s.microbatch == -1;
    if (factored && !copy_ok) {
      return Error(where(), "micro-batch ", s.microbatch, " of ",
                   s.is_collective ? "collective " : "task ", s.id, ", which is ",
                   tag == 0 ? absl::StrCat("tagged (expected 0..", n - 1, ")")
                            : std::string("untagged (expected -1)"));
    }
    const int64_t copy = std::max(s.microbatch, 0);
    if (!s.is_collective) {
      const Task& t = plan_.tasks[s.id];
      if (t.device != d) return Error(where(), "task ", s.id, " runs on device ", t.device);
      if (task_seen[task_first[s.id] + copy]++ > 0) {
        return Error(where(), "task ", s.id, copy_name(s), " appears twice");
      }
      return absl::OkStatus();
    }
    const Collective& c = plan_.collectives[s.id];
    bool member = false;
    for (int64_t x : c.devices) member |= x == d;
    if (!member) return Error(where(), "collective ", s.id, " does not include device ", d);
    const int64_t k = collective_first[s.id] + copy;
    if (last_device[k] == d) {
      return Error(where(), "collective ", s.id, copy_name(s), " appears twice on device ", d);
    }
    last_device[k] = d;
    ++collective_seen[k];
    return absl::OkStatus();
  };
  for (int64_t d = 0; d < programs; ++d) {
    if (!factored) {
      const std::vector<PlanStep>& steps = plan_.order[d];
      for (size_t j = 0; j < steps.size(); ++j) {
        LOOM_RETURN_IF_ERROR(
            check(d, steps[j], [&] { return absl::StrCat("order[", d, "][", j, "]"); }));
      }
      continue;
    }
    const std::vector<OrderRun>& program = runs.programs[d];
    for (size_t j = 0; j < program.size(); ++j) {
      const OrderRun& run = program[j];
      if (run.segment < 0 || run.segment >= static_cast<int32_t>(runs.segments.size())) {
        return Error(absl::StrCat("order[", d, "][", j, "]"), "unknown segment ", run.segment);
      }
      for (PlanStep s : runs.segments[run.segment]) {
        s.microbatch = run.microbatch;
        LOOM_RETURN_IF_ERROR(check(d, s, [&] {
          return absl::StrCat("order[", d, "][", j, "] (segment ", run.segment, ")");
        }));
      }
    }
  }
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    for (int64_t k = task_first[t]; k < task_first[t + 1]; ++k) {
      if (task_seen[k] != 0) continue;
      const std::string mb =
          factored && plan_.tasks[t].info.microbatch == 0
              ? absl::StrCat(" (micro-batch ", k - task_first[t], ")")
              : std::string();
      return Error("order", "task ", t, mb, " is on no device's list (device ",
                   plan_.tasks[t].device, ")");
    }
  }
  for (size_t c = 0; c < plan_.collectives.size(); ++c) {
    for (int64_t k = collective_first[c]; k < collective_first[c + 1]; ++k) {
      if (collective_seen[k] == static_cast<int64_t>(plan_.collectives[c].devices.size())) {
        continue;
      }
      const std::string mb =
          factored && plan_.collectives[c].microbatch == 0
              ? absl::StrCat(" (micro-batch ", k - collective_first[c], ")")
              : std::string();
      return Error("order", "collective ", c, mb, " is on ", collective_seen[k], " of its ",
                   plan_.collectives[c].devices.size(), " devices' lists");
    }
  }
  return absl::OkStatus();
}

absl::Status Validator::Run(bool structure, bool types, const ImpliedTypes& implied) {
  LOOM_RETURN_IF_ERROR(CheckMesh());
  if (mbmap_ == nullptr) {
    auto mbmap = MicrobatchMap::Build(spec_);
    if (!mbmap.ok()) {
      return absl::Status(mbmap.status().code(),
                          absl::StrCat("plan: spec: ", mbmap.status().message()));
    }
    owned_mbmap_ = *std::move(mbmap);
    mbmap_ = &owned_mbmap_;
  }
  if (plan_.is_factored()) {
    LOOM_RETURN_IF_ERROR(ValidateFactoring(plan_, *mbmap_));
    dp_ = plan_.factoring->dp;
  }
  const int nv = static_cast<int>(plan_.values.size());
  const int nt = static_cast<int>(plan_.tasks.size());
  const int nc = static_cast<int>(plan_.collectives.size());
  if (structure) {
    for (int i = 0; i < nv; ++i) LOOM_RETURN_IF_ERROR(CheckValue(i));
    producer_.assign(plan_.values.size(), PlanStep{});
    for (int i = 0; i < nt; ++i) LOOM_RETURN_IF_ERROR(CheckTask(i));
    for (int i = 0; i < nc; ++i) LOOM_RETURN_IF_ERROR(CheckCollective(i));
    for (size_t i = 0; i < plan_.outputs.size(); ++i) {
      if (!ValidValue(plan_.outputs[i])) {
        return Error(absl::StrCat("outputs[", i, "]"), "unknown value id ", plan_.outputs[i]);
      }
    }
    LOOM_RETURN_IF_ERROR(CheckOrder());
  }
  if (types) {
    auto left_out = [](const std::vector<char>* marks, int i) {
      return marks != nullptr && i < static_cast<int>(marks->size()) && (*marks)[i] != 0;
    };
    for (int i = 0; i < nv; ++i) {
      if (!left_out(implied.values, i)) LOOM_RETURN_IF_ERROR(CheckValueTypes(i));
    }
    for (int i = 0; i < nt; ++i) {
      if (!left_out(implied.tasks, i)) LOOM_RETURN_IF_ERROR(CheckTaskAgainstOp(i));
    }
    for (int i = 0; i < nc; ++i) {
      if (left_out(implied.collectives, i)) continue;
      const auto where_text = [this, i] { return CollectiveWhere(i); };
      LOOM_RETURN_IF_ERROR(CheckCollectiveTypes(plan_.collectives[i], Where(where_text)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlan(const Graph& spec, const Plan& plan) {
  Validator validator(spec, plan);
  return validator.Run(/*structure=*/true, /*types=*/true);
}

absl::Status ValidatePlan(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap) {
  Validator validator(spec, plan, &mbmap);
  return validator.Run(/*structure=*/true, /*types=*/true);
}

absl::Status ValidatePlanStructure(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap) {
  Validator validator(spec, plan, &mbmap);
  return validator.Run(/*structure=*/true, /*types=*/false);
}

absl::Status ValidatePlanTypes(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap,
                               const ImpliedTypes& implied) {
  Validator validator(spec, plan, &mbmap);
  return validator.Run(/*structure=*/false, /*types=*/true, implied);
}

}  // namespace loom::ir
