#include "ir/plan_json.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

constexpr absl::string_view kFormatName = "loom.plan";

// ---- writing -------------------------------------------------------------------
// Hand-written rather than built through nlohmann objects: plans have hundreds of
// thousands of items. Every name written here is a fixed ASCII token except the
// model name, mesh axis names and attribute strings, which go through JsonString.

void AppendIds(std::string* out, absl::Span<const int32_t> ids) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, ids[i]);
  }
  out->push_back(']');
}

void AppendDevices(std::string* out, absl::Span<const int64_t> ids) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, ids[i]);
  }
  out->push_back(']');
}

const char* Bool(bool b) { return b ? "true" : "false"; }

void AppendValue(std::string* out, const PlanValue& v) {
  absl::StrAppend(out, "{\"id\":", v.id, ",\"device\":", v.device, ",\"tensor\":", v.sub.tensor,
                  ",\"box\":[");
  for (size_t i = 0; i < v.sub.box.size(); ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", "[", v.sub.box[i].begin, ",", v.sub.box[i].end, "]");
  }
  absl::StrAppend(out, "],\"part\":\"", v.sub.part.ToString(), "\",\"dtype\":\"",
                  DTypeName(v.dtype), "\",\"microbatch\":", v.microbatch);
  if (v.sub.combine == ReduceOp::kMax) out->append(",\"combine\":\"max\"");
  if (v.sub.combine == ReduceOp::kLogSumExp) out->append(",\"combine\":\"logsumexp\"");
  if (!v.sub.scale.IsOne()) absl::StrAppend(out, ",\"scale\":\"", v.sub.scale.ToString(), "\"");
  if (v.dp_dim >= 0) absl::StrAppend(out, ",\"dp_dim\":", v.dp_dim);
  if (v.dp_share) absl::StrAppend(out, ",\"dp_share\":true");
  out->push_back('}');
}

void AppendTask(std::string* out, const Task& t) {
  absl::StrAppend(out, "{\"id\":", t.id, ",\"op\":", t.op, ",\"kind\":\"", OpKindName(t.kind),
                  "\",\"attrs\":", AttrsToJson(t.attrs), ",\"device\":", t.device,
                  ",\"phase\":\"", PhaseName(t.info.phase), "\",\"layer\":", t.info.layer,
                  ",\"microbatch\":", t.info.microbatch, ",\"stage\":", t.stage,
                  ",\"recompute\":", Bool(t.recompute), ",\"inputs\":");
  AppendIds(out, t.inputs);
  out->append(",\"outputs\":");
  AppendIds(out, t.outputs);
  if (!t.dp_attr_steps.empty()) {
    out->append(",\"dp_attrs\":{");
    bool first = true;
    for (const auto& [name, step] : t.dp_attr_steps) {
      absl::StrAppend(out, first ? "" : ",", JsonString(name), ":", step);
      first = false;
    }
    out->push_back('}');
  }
  out->push_back('}');
}

void AppendCollective(std::string* out, const Collective& c) {
  absl::StrAppend(out, "{\"id\":", c.id, ",\"kind\":\"", CollectiveKindName(c.kind),
                  "\",\"reduce\":\"", ReduceOpName(c.reduce),
                  "\",\"devices\":");
  AppendDevices(out, c.devices);
  out->append(",\"inputs\":");
  AppendIds(out, c.inputs);
  out->append(",\"outputs\":");
  AppendIds(out, c.outputs);
  absl::StrAppend(out, ",\"dim\":", c.dim, ",\"dim2\":", c.dim2, ",\"microbatch\":", c.microbatch,
                  ",\"phase\":\"", PhaseName(c.phase), "\",\"layer\":", c.layer,
                  ",\"recompute\":", Bool(c.recompute), ",\"spans_dp\":", Bool(c.spans_dp), "}");
}

void AppendSteps(std::string* out, const std::vector<PlanStep>& steps) {
  out->push_back('[');
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", "{\"collective\":", Bool(steps[i].is_collective),
                    ",\"id\":", steps[i].id, "}");
  }
  out->push_back(']');
}

// A factored plan's order (docs/formats.md): its segments, each step [0, task id]
// or [1, collective id], then per unit device its runs as [segment, copy] pairs.
void AppendFactoredOrder(std::string* out, const FactoredOrder& order) {
  out->append("  \"order_segments\": [");
  for (size_t k = 0; k < order.segments.size(); ++k) {
    out->append(k > 0 ? ",\n    [" : "\n    [");
    const std::vector<PlanStep>& steps = order.segments[k];
    for (size_t i = 0; i < steps.size(); ++i) {
      absl::StrAppend(out, i > 0 ? "," : "", "[", steps[i].is_collective ? 1 : 0, ",",
                      steps[i].id, "]");
    }
    out->push_back(']');
  }
  out->append(order.segments.empty() ? "],\n" : "\n  ],\n");
  out->append("  \"order\": [");
  for (size_t d = 0; d < order.programs.size(); ++d) {
    out->append(d > 0 ? ",\n    [" : "\n    [");
    for (size_t k = 0; k < order.programs[d].size(); ++k) {
      absl::StrAppend(out, k > 0 ? "," : "", "[", order.programs[d][k].segment, ",",
                      order.programs[d][k].microbatch, "]");
    }
    out->push_back(']');
  }
  out->append(order.programs.empty() ? "]\n" : "\n  ]\n");
}

// `"key": [\n    item,\n    item\n  ]`, one item per line.
template <typename T, typename F>
void AppendList(std::string* out, absl::string_view key, const std::vector<T>& items,
                F append_item, bool last = false) {
  absl::StrAppend(out, "  \"", key, "\": ");
  if (items.empty()) {
    out->append("[]");
  } else {
    out->append("[\n");
    for (size_t i = 0; i < items.size(); ++i) {
      out->append("    ");
      append_item(out, items[i]);
      out->append(i + 1 < items.size() ? ",\n" : "\n");
    }
    out->append("  ]");
  }
  out->append(last ? "\n" : ",\n");
}

// ---- reading -------------------------------------------------------------------

// Field lookups build their JSON path only when reporting an error.
class PlanReader : public JsonReader {
 public:
  explicit PlanReader(absl::string_view filename) : JsonReader(filename) {}

  absl::StatusOr<Plan> Read(const Json& root);

 private:
  static const Json* Find(const Json& object, const char* key) {
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }
  static std::string At(absl::string_view item, absl::string_view key) {
    return item.empty() ? std::string(key) : absl::StrCat(item, ".", key);
  }
  absl::StatusOr<const Json*> Require(const Json& object, const char* key,
                                      absl::string_view item) const {
    const Json* j = Find(object, key);
    if (j == nullptr) return Error(item, absl::StrCat("missing field '", key, "'"));
    return j;
  }
  // Integer field in [lo, hi]; `fallback` when absent and optional.
  absl::StatusOr<int64_t> IntField(const Json& object, const char* key, absl::string_view item,
                                   int64_t lo, int64_t hi,
                                   std::optional<int64_t> fallback = std::nullopt) const;
  absl::StatusOr<bool> BoolField(const Json& object, const char* key, absl::string_view item,
                                 bool fallback) const;
  absl::StatusOr<std::string> StringField(const Json& object, const char* key,
                                          absl::string_view item,
                                          std::optional<std::string> fallback = std::nullopt) const;
  // Finite number field in [lo, hi].
  absl::StatusOr<double> DoubleField(const Json& object, const char* key, absl::string_view item,
                                     double lo, double hi) const;
  // Array of ids each in [0, limit).
  absl::StatusOr<std::vector<int32_t>> IdsField(const Json& object, const char* key,
                                                absl::string_view item, int64_t limit,
                                                absl::string_view what) const;
  absl::Status CheckId(const Json& object, absl::string_view item, size_t index,
                       absl::string_view what) const;
  absl::StatusOr<Phase> PhaseField(const Json& object, absl::string_view item,
                                   std::optional<Phase> fallback) const;

  absl::Status ReadMesh(const Json& root, Plan& plan) const;
  absl::Status ReadFactoring(const Json& j, Plan& plan) const;
  absl::Status ReadStepSource(const Json& j, Plan& plan) const;
  absl::StatusOr<PlanValue> ReadValue(const Json& j, size_t index) const;
  absl::StatusOr<Task> ReadTask(const Json& j, size_t index) const;
  absl::StatusOr<Collective> ReadCollective(const Json& j, size_t index) const;
  absl::Status ReadOrder(const Json& j, Plan& plan) const;
  absl::Status ReadFactoredOrder(const Json& segments, const Json& j, Plan& plan) const;

  int64_t num_devices_ = 1;
  int64_t num_values_ = 0;
};

absl::StatusOr<int64_t> PlanReader::IntField(const Json& object, const char* key,
                                             absl::string_view item, int64_t lo, int64_t hi,
                                             std::optional<int64_t> fallback) const {
  const Json* j = Find(object, key);
  if (j == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Error(item, absl::StrCat("missing field '", key, "'"));
  }
  if (!j->is_number_integer()) return Error(At(item, key), "expected an integer");
  if (j->is_number_unsigned() && j->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Error(At(item, key), "integer is out of range");
  }
  const int64_t v = j->get<int64_t>();
  if (v < lo || v > hi) {
    return Error(At(item, key), absl::StrCat(v, " is out of range (expected ", lo, "..", hi, ")"));
  }
  return v;
}

absl::StatusOr<bool> PlanReader::BoolField(const Json& object, const char* key,
                                           absl::string_view item, bool fallback) const {
  const Json* j = Find(object, key);
  if (j == nullptr) return fallback;
  return Bool(*j, At(item, key));
}

absl::StatusOr<std::string> PlanReader::StringField(const Json& object, const char* key,
                                                    absl::string_view item,
                                                    std::optional<std::string> fallback) const {
  const Json* j = Find(object, key);
  if (j == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Error(item, absl::StrCat("missing field '", key, "'"));
  }
  if (!j->is_string()) return Error(At(item, key), "expected a string");
  return j->get<std::string>();
}

absl::StatusOr<double> PlanReader::DoubleField(const Json& object, const char* key,
                                               absl::string_view item, double lo,
                                               double hi) const {
  LOOM_ASSIGN_OR_RETURN(const Json* j, Require(object, key, item));
  if (!j->is_number()) return Error(At(item, key), "expected a number");
  const double v = j->get<double>();
  if (!(v >= lo && v <= hi)) {
    return Error(At(item, key), absl::StrCat(v, " is out of range (expected ", lo, "..", hi, ")"));
  }
  return v;
}

absl::StatusOr<std::vector<int32_t>> PlanReader::IdsField(const Json& object, const char* key,
                                                          absl::string_view item, int64_t limit,
                                                          absl::string_view what) const {
  LOOM_ASSIGN_OR_RETURN(const Json* j, Require(object, key, item));
  if (!j->is_array()) return Error(At(item, key), "expected an array");
  std::vector<int32_t> ids;
  ids.reserve(j->size());
  for (size_t i = 0; i < j->size(); ++i) {
    const Json& e = (*j)[i];
    if (!e.is_number_integer()) {
      return Error(absl::StrCat(At(item, key), "[", i, "]"), "expected an integer");
    }
    const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() < static_cast<uint64_t>(limit)
                                                 : (e.get<int64_t>() >= 0 && e.get<int64_t>() < limit);
    if (!in_range) {
      return Error(absl::StrCat(At(item, key), "[", i, "]"),
                   absl::StrCat("unknown ", what, " id ", e.dump()));
    }
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

absl::Status PlanReader::CheckId(const Json& object, absl::string_view item, size_t index,
                                 absl::string_view what) const {
  LOOM_ASSIGN_OR_RETURN(int64_t id, IntField(object, "id", item, INT64_MIN, INT64_MAX));
  if (id != static_cast<int64_t>(index)) {
    return Error(At(item, "id"), absl::StrCat("expected ", index, ", got ", id, " (", what,
                                              " ids are dense and in order)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Phase> PlanReader::PhaseField(const Json& object, absl::string_view item,
                                             std::optional<Phase> fallback) const {
  if (Find(object, "phase") == nullptr && fallback.has_value()) return *fallback;
  LOOM_ASSIGN_OR_RETURN(std::string name, StringField(object, "phase", item));
  auto phase = ParsePhase(name);
  if (!phase.ok()) return Error(At(item, "phase"), phase.status().message());
  return *phase;
}

absl::Status PlanReader::ReadMesh(const Json& root, Plan& plan) const {
  LOOM_ASSIGN_OR_RETURN(const Json* mesh, Require(root, "mesh", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*mesh, "mesh"));
  std::vector<MeshAxis> axes;
  int64_t devices = 1;
  constexpr int64_t kMaxDevices = int64_t{1} << 31;
  for (size_t i = 0; i < mesh->size(); ++i) {
    const std::string item = absl::StrCat("mesh[", i, "]");
    const Json& a = (*mesh)[i];
    LOOM_RETURN_IF_ERROR(ExpectObject(a, item));
    MeshAxis axis;
    LOOM_ASSIGN_OR_RETURN(axis.name, StringField(a, "name", item));
    LOOM_ASSIGN_OR_RETURN(axis.size, IntField(a, "size", item, 1, kMaxDevices));
    if (devices * axis.size > kMaxDevices) {
      return Error(At(item, "size"), absl::StrCat("the mesh has more than ", kMaxDevices,
                                                  " devices"));
    }
    devices *= axis.size;
    axes.push_back(std::move(axis));
  }
  plan.mesh = Mesh(std::move(axes));
  return absl::OkStatus();
}

absl::Status PlanReader::ReadFactoring(const Json& j, Plan& plan) const {
  const std::string item = "factoring";
  LOOM_RETURN_IF_ERROR(ExpectObject(j, item));
  Factoring f;
  LOOM_ASSIGN_OR_RETURN(f.dp, IntField(j, "dp", item, 1, num_devices_));
  LOOM_ASSIGN_OR_RETURN(f.dp_device_stride,
                        IntField(j, "dp_device_stride", item, 0, num_devices_));
  LOOM_ASSIGN_OR_RETURN(int64_t m, IntField(j, "microbatches", item, 1, kMaxMicrobatches));
  f.microbatches = static_cast<int>(m);
  plan.factoring = f;
  return absl::OkStatus();
}

absl::Status PlanReader::ReadStepSource(const Json& j, Plan& plan) const {
  const std::string item = "step";
  LOOM_RETURN_IF_ERROR(ExpectObject(j, item));
  static constexpr const char* kKeys[] = {
      "model", "tiny", "layers", "batch", "seq", "precision", "microbatches", "max_grad_norm",
      "optimizer", "lr", "beta1", "beta2", "eps", "weight_decay", "optimizer_step"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(std::begin(kKeys), std::end(kKeys), it.key()) == std::end(kKeys)) {
      return Error(At(item, it.key()), "unknown field of the step (docs/formats.md)");
    }
  }
  PlanStepSource s;
  TrainingOptions& t = s.training;
  LOOM_ASSIGN_OR_RETURN(s.model, StringField(j, "model", item));
  LOOM_ASSIGN_OR_RETURN(s.tiny, BoolField(j, "tiny", item, false));
  LOOM_ASSIGN_OR_RETURN(int64_t layers, IntField(j, "layers", item, 1, kMaxLayers));
  s.layers = static_cast<int>(layers);
  LOOM_ASSIGN_OR_RETURN(s.batch, IntField(j, "batch", item, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(s.seq, IntField(j, "seq", item, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(std::string precision, StringField(j, "precision", item));
  absl::StatusOr<Precision> parsed_precision = ParsePrecision(precision);
  if (!parsed_precision.ok()) {
    return Error(At(item, "precision"),
                 absl::StrCat("expected one of ", PrecisionNames(), ", got \"", precision, "\""));
  }
  t.precision = *parsed_precision;
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches,
                        IntField(j, "microbatches", item, 1, kMaxMicrobatches));
  t.microbatches = static_cast<int>(microbatches);
  LOOM_ASSIGN_OR_RETURN(t.max_grad_norm, DoubleField(j, "max_grad_norm", item, 0, 1e30));
  LOOM_ASSIGN_OR_RETURN(std::string optimizer, StringField(j, "optimizer", item));
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(optimizer);
  if (!kind.ok()) {
    return Error(At(item, "optimizer"),
                 absl::StrCat("expected adamw or sgd, got \"", optimizer, "\""));
  }
  t.optimizer = *kind;
  LOOM_ASSIGN_OR_RETURN(t.lr, DoubleField(j, "lr", item, 0, 1e30));
  LOOM_ASSIGN_OR_RETURN(t.beta1, DoubleField(j, "beta1", item, 0, 1));
  LOOM_ASSIGN_OR_RETURN(t.beta2, DoubleField(j, "beta2", item, 0, 1));
  LOOM_ASSIGN_OR_RETURN(t.eps, DoubleField(j, "eps", item, 0, 1));
  LOOM_ASSIGN_OR_RETURN(t.weight_decay, DoubleField(j, "weight_decay", item, 0, 1e30));
  LOOM_ASSIGN_OR_RETURN(t.step, IntField(j, "optimizer_step", item, 1, int64_t{1} << 40));
  if (s.model.empty()) return Error(At(item, "model"), "empty model name");
  plan.step = std::move(s);
  return absl::OkStatus();
}

absl::StatusOr<PlanValue> PlanReader::ReadValue(const Json& j, size_t index) const {
  const std::string item = absl::StrCat("values[", index, "]");
  LOOM_RETURN_IF_ERROR(ExpectObject(j, item));
  LOOM_RETURN_IF_ERROR(CheckId(j, item, index, "value"));
  PlanValue v;
  v.id = static_cast<ValueId>(index);
  LOOM_ASSIGN_OR_RETURN(v.device, IntField(j, "device", item, 0, num_devices_ - 1));
  LOOM_ASSIGN_OR_RETURN(int64_t tensor, IntField(j, "tensor", item, 0, INT32_MAX));
  v.sub.tensor = static_cast<TensorId>(tensor);
  LOOM_ASSIGN_OR_RETURN(const Json* box, Require(j, "box", item));
  const std::string box_path = At(item, "box");
  LOOM_RETURN_IF_ERROR(ExpectArray(*box, box_path));
  v.sub.box.reserve(box->size());
  for (size_t d = 0; d < box->size(); ++d) {
    const Json& iv = (*box)[d];
    auto bad = [&]() {
      return Error(absl::StrCat(box_path, "[", d, "]"),
                   "expected [begin, end] with 0 <= begin <= end");
    };
    if (!iv.is_array() || iv.size() != 2 || !iv[0].is_number_integer() ||
        !iv[1].is_number_integer()) {
      return bad();
    }
    if ((iv[0].is_number_unsigned() && iv[0].get<uint64_t>() > INT64_MAX) ||
        (iv[1].is_number_unsigned() && iv[1].get<uint64_t>() > INT64_MAX)) {
      return bad();
    }
    Interval interval{iv[0].get<int64_t>(), iv[1].get<int64_t>()};
    if (interval.begin < 0 || interval.end < interval.begin) return bad();
    v.sub.box.push_back(interval);
  }
  LOOM_ASSIGN_OR_RETURN(std::string part, StringField(j, "part", item));
  auto parsed_part = ValuePart::Parse(part);
  if (!parsed_part.ok()) return Error(At(item, "part"), parsed_part.status().message());
  v.sub.part = *std::move(parsed_part);
  LOOM_ASSIGN_OR_RETURN(std::string combine, StringField(j, "combine", item, "sum"));
  if (combine == "sum") {
    v.sub.combine = ReduceOp::kSum;
  } else if (combine == "max") {
    v.sub.combine = ReduceOp::kMax;
  } else if (combine == "logsumexp") {
    v.sub.combine = ReduceOp::kLogSumExp;
  } else {
    return Error(At(item, "combine"), absl::StrCat("unknown combination '", combine,
                                                   "' (expected sum, max or logsumexp)"));
  }
  LOOM_ASSIGN_OR_RETURN(std::string scale, StringField(j, "scale", item, "1"));
  auto parsed_scale = ParseSignedRational(scale);
  if (!parsed_scale.ok()) return Error(At(item, "scale"), parsed_scale.status().message());
  if (parsed_scale->num == 0) {
    return Error(At(item, "scale"), "a scale of 0 (a zero value claims the empty part)");
  }
  v.sub.scale = *parsed_scale;
  LOOM_ASSIGN_OR_RETURN(std::string dtype, StringField(j, "dtype", item));
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype.ok()) return Error(At(item, "dtype"), parsed_dtype.status().message());
  v.dtype = *parsed_dtype;
  LOOM_ASSIGN_OR_RETURN(int64_t mb, IntField(j, "microbatch", item, -1, INT32_MAX, -1));
  v.microbatch = static_cast<int>(mb);
  LOOM_ASSIGN_OR_RETURN(int64_t dp_dim,
                        IntField(j, "dp_dim", item, -1,
                                 static_cast<int64_t>(v.sub.box.size()) - 1, -1));
  v.dp_dim = static_cast<int>(dp_dim);
  LOOM_ASSIGN_OR_RETURN(v.dp_share, BoolField(j, "dp_share", item, false));
  return v;
}

absl::StatusOr<Task> PlanReader::ReadTask(const Json& j, size_t index) const {
  const std::string item = absl::StrCat("tasks[", index, "]");
  LOOM_RETURN_IF_ERROR(ExpectObject(j, item));
  LOOM_RETURN_IF_ERROR(CheckId(j, item, index, "task"));
  Task t;
  t.id = static_cast<TaskId>(index);
  LOOM_ASSIGN_OR_RETURN(int64_t op, IntField(j, "op", item, -1, INT32_MAX));
  t.op = static_cast<OpId>(op);
  LOOM_ASSIGN_OR_RETURN(std::string kind, StringField(j, "kind", item));
  auto parsed_kind = ParseOpKind(kind);
  if (!parsed_kind.ok()) return Error(At(item, "kind"), parsed_kind.status().message());
  t.kind = *parsed_kind;
  if (const Json* attrs = Find(j, "attrs")) {
    LOOM_ASSIGN_OR_RETURN(t.attrs, Attrs(*attrs, At(item, "attrs")));
  }
  LOOM_ASSIGN_OR_RETURN(t.device, IntField(j, "device", item, 0, num_devices_ - 1));
  LOOM_ASSIGN_OR_RETURN(t.info.phase, PhaseField(j, item, std::nullopt));
  LOOM_ASSIGN_OR_RETURN(int64_t layer, IntField(j, "layer", item, -1, INT32_MAX, -1));
  t.info.layer = static_cast<int>(layer);
  LOOM_ASSIGN_OR_RETURN(int64_t mb, IntField(j, "microbatch", item, -1, INT32_MAX, -1));
  t.info.microbatch = static_cast<int>(mb);
  LOOM_ASSIGN_OR_RETURN(int64_t stage, IntField(j, "stage", item, -1, INT32_MAX, -1));
  t.stage = static_cast<int>(stage);
  LOOM_ASSIGN_OR_RETURN(t.recompute, BoolField(j, "recompute", item, false));
  LOOM_ASSIGN_OR_RETURN(t.inputs, IdsField(j, "inputs", item, num_values_, "value"));
  LOOM_ASSIGN_OR_RETURN(t.outputs, IdsField(j, "outputs", item, num_values_, "value"));
  if (const Json* steps = Find(j, "dp_attrs")) {
    const std::string path = At(item, "dp_attrs");
    LOOM_RETURN_IF_ERROR(ExpectObject(*steps, path));
    for (auto it = steps->begin(); it != steps->end(); ++it) {
      LOOM_ASSIGN_OR_RETURN(t.dp_attr_steps[it.key()],
                            Int(it.value(), absl::StrCat(path, ".", it.key())));
    }
  }
  return t;
}

absl::StatusOr<Collective> PlanReader::ReadCollective(const Json& j, size_t index) const {
  const std::string item = absl::StrCat("collectives[", index, "]");
  LOOM_RETURN_IF_ERROR(ExpectObject(j, item));
  LOOM_RETURN_IF_ERROR(CheckId(j, item, index, "collective"));
  Collective c;
  c.id = static_cast<CollectiveId>(index);
  LOOM_ASSIGN_OR_RETURN(std::string kind, StringField(j, "kind", item));
  auto parsed_kind = ParseCollectiveKind(kind);
  if (!parsed_kind.ok()) return Error(At(item, "kind"), parsed_kind.status().message());
  c.kind = *parsed_kind;
  LOOM_ASSIGN_OR_RETURN(std::string reduce, StringField(j, "reduce", item, "sum"));
  if (reduce == "sum") {
    c.reduce = ReduceOp::kSum;
  } else if (reduce == "max") {
    c.reduce = ReduceOp::kMax;
  } else if (reduce == "avg") {
    c.reduce = ReduceOp::kAvg;
  } else {
    return Error(At(item, "reduce"), absl::StrCat("unknown reduction '", reduce,
                                                  "' (expected sum, max or avg)"));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* devices, Require(j, "devices", item));
  const std::string devices_path = At(item, "devices");
  LOOM_RETURN_IF_ERROR(ExpectArray(*devices, devices_path));
  for (size_t i = 0; i < devices->size(); ++i) {
    const std::string path = absl::StrCat(devices_path, "[", i, "]");
    LOOM_ASSIGN_OR_RETURN(int64_t d, Int((*devices)[i], path));
    if (d < 0 || d >= num_devices_) {
      return Error(path, absl::StrCat("device ", d, " is outside the mesh (", num_devices_,
                                      " devices)"));
    }
    c.devices.push_back(d);
  }
  LOOM_ASSIGN_OR_RETURN(c.inputs, IdsField(j, "inputs", item, num_values_, "value"));
  LOOM_ASSIGN_OR_RETURN(c.outputs, IdsField(j, "outputs", item, num_values_, "value"));
  LOOM_ASSIGN_OR_RETURN(int64_t dim, IntField(j, "dim", item, -1, INT32_MAX, -1));
  c.dim = static_cast<int>(dim);
  LOOM_ASSIGN_OR_RETURN(int64_t dim2, IntField(j, "dim2", item, -1, INT32_MAX, -1));
  c.dim2 = static_cast<int>(dim2);
  LOOM_ASSIGN_OR_RETURN(int64_t mb, IntField(j, "microbatch", item, -1, INT32_MAX, -1));
  c.microbatch = static_cast<int>(mb);
  LOOM_ASSIGN_OR_RETURN(c.phase, PhaseField(j, item, Phase::kForward));
  LOOM_ASSIGN_OR_RETURN(int64_t layer, IntField(j, "layer", item, -1, INT32_MAX, -1));
  c.layer = static_cast<int>(layer);
  LOOM_ASSIGN_OR_RETURN(c.recompute, BoolField(j, "recompute", item, false));
  LOOM_ASSIGN_OR_RETURN(c.spans_dp, BoolField(j, "spans_dp", item, false));
  return c;
}

absl::Status PlanReader::ReadOrder(const Json& j, Plan& plan) const {
  LOOM_RETURN_IF_ERROR(ExpectArray(j, "order"));
  plan.order.resize(j.size());
  for (size_t d = 0; d < j.size(); ++d) {
    const std::string list = absl::StrCat("order[", d, "]");
    LOOM_RETURN_IF_ERROR(ExpectArray(j[d], list));
    plan.order[d].reserve(j[d].size());
    for (size_t k = 0; k < j[d].size(); ++k) {
      const Json& step = j[d][k];
      const std::string item = absl::StrCat(list, "[", k, "]");
      LOOM_RETURN_IF_ERROR(ExpectObject(step, item));
      LOOM_ASSIGN_OR_RETURN(const Json* collective, Require(step, "collective", item));
      LOOM_ASSIGN_OR_RETURN(bool is_collective, Bool(*collective, At(item, "collective")));
      const int64_t limit = is_collective ? static_cast<int64_t>(plan.collectives.size())
                                          : static_cast<int64_t>(plan.tasks.size());
      LOOM_ASSIGN_OR_RETURN(int64_t id, IntField(step, "id", item, INT64_MIN, INT64_MAX));
      if (id < 0 || id >= limit) {
        return Error(At(item, "id"),
                     absl::StrCat("unknown ", is_collective ? "collective" : "task", " id ", id));
      }
      plan.order[d].push_back(PlanStep{is_collective, static_cast<int32_t>(id)});
    }
  }
  return absl::OkStatus();
}

absl::Status PlanReader::ReadFactoredOrder(const Json& segments, const Json& j,
                                           Plan& plan) const {
  FactoredOrder& order = plan.factored_order;
  LOOM_RETURN_IF_ERROR(ExpectArray(segments, "order_segments"));
  order.segments.assign(segments.size(), {});
  for (size_t k = 0; k < segments.size(); ++k) {
    const std::string item = absl::StrCat("order_segments[", k, "]");
    LOOM_RETURN_IF_ERROR(ExpectArray(segments[k], item));
    order.segments[k].reserve(segments[k].size());
    for (size_t i = 0; i < segments[k].size(); ++i) {
      const Json& step = segments[k][i];
      const std::string at = absl::StrCat(item, "[", i, "]");
      if (!step.is_array() || step.size() != 2) {
        return Error(at, "expected [kind, id] (kind 0: task, 1: collective)");
      }
      LOOM_ASSIGN_OR_RETURN(int64_t kind, Int(step[0], at));
      LOOM_ASSIGN_OR_RETURN(int64_t id, Int(step[1], at));
      if (kind != 0 && kind != 1) return Error(at, absl::StrCat("kind ", kind, " is not 0 or 1"));
      const int64_t limit = kind == 1 ? static_cast<int64_t>(plan.collectives.size())
                                      : static_cast<int64_t>(plan.tasks.size());
      if (id < 0 || id >= limit) {
        return Error(at, absl::StrCat("unknown ", kind == 1 ? "collective" : "task", " id ", id));
      }
      order.segments[k].push_back(PlanStep{kind == 1, static_cast<int32_t>(id)});
    }
  }
  LOOM_RETURN_IF_ERROR(ExpectArray(j, "order"));
  order.programs.assign(j.size(), {});
  for (size_t d = 0; d < j.size(); ++d) {
    const std::string list = absl::StrCat("order[", d, "]");
    LOOM_RETURN_IF_ERROR(ExpectArray(j[d], list));
    order.programs[d].reserve(j[d].size());
    for (size_t k = 0; k < j[d].size(); ++k) {
      const Json& run = j[d][k];
      const std::string at = absl::StrCat(list, "[", k, "]");
      if (!run.is_array() || run.size() != 2) return Error(at, "expected [segment, micro-batch]");
      LOOM_ASSIGN_OR_RETURN(int64_t segment, Int(run[0], at));
      LOOM_ASSIGN_OR_RETURN(int64_t microbatch, Int(run[1], at));
      if (segment < 0 || segment >= static_cast<int64_t>(order.segments.size())) {
        return Error(at, absl::StrCat("unknown segment ", segment));
      }
      if (microbatch < -1 || microbatch > INT32_MAX) {
        return Error(at, absl::StrCat("micro-batch ", microbatch, " is not a copy (-1 or more)"));
      }
      order.programs[d].push_back(
          OrderRun{static_cast<int32_t>(segment), static_cast<int32_t>(microbatch)});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> PlanReader::Read(const Json& root) {
  if (!root.is_object()) return Error("", "expected a JSON object");
  LOOM_ASSIGN_OR_RETURN(std::string format, StringField(root, "format", ""));
  if (format != kFormatName) {
    return Error("format", absl::StrCat("expected \"", kFormatName, "\", got \"", format, "\""));
  }
  LOOM_ASSIGN_OR_RETURN(int64_t version, IntField(root, "version", "", INT64_MIN, INT64_MAX));
  if (version != kPlanJsonVersion) {
    return Error("version", absl::StrCat("unsupported version ", version,
                                         " (this reader handles ", kPlanJsonVersion, ")"));
  }
  Plan plan;
  LOOM_ASSIGN_OR_RETURN(plan.model, StringField(root, "model", ""));
  LOOM_RETURN_IF_ERROR(ReadMesh(root, plan));
  num_devices_ = plan.mesh.num_devices();
  if (const Json* factoring = Find(root, "factoring")) {
    LOOM_RETURN_IF_ERROR(ReadFactoring(*factoring, plan));
  }
  if (const Json* step = Find(root, "step")) {
    LOOM_RETURN_IF_ERROR(ReadStepSource(*step, plan));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* values, Require(root, "values", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*values, "values"));
  LOOM_ASSIGN_OR_RETURN(const Json* tasks, Require(root, "tasks", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*tasks, "tasks"));
  LOOM_ASSIGN_OR_RETURN(const Json* collectives, Require(root, "collectives", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*collectives, "collectives"));
  if (values->size() > INT32_MAX || tasks->size() > INT32_MAX ||
      collectives->size() > INT32_MAX) {
    return Error("", "too many values, tasks or collectives");
  }
  num_values_ = static_cast<int64_t>(values->size());
  plan.values.reserve(values->size());
  for (size_t i = 0; i < values->size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(PlanValue v, ReadValue((*values)[i], i));
    plan.values.push_back(std::move(v));
  }
  plan.tasks.reserve(tasks->size());
  for (size_t i = 0; i < tasks->size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Task t, ReadTask((*tasks)[i], i));
    plan.tasks.push_back(std::move(t));
  }
  plan.collectives.reserve(collectives->size());
  for (size_t i = 0; i < collectives->size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Collective c, ReadCollective((*collectives)[i], i));
    plan.collectives.push_back(std::move(c));
  }
  if (Find(root, "outputs") != nullptr) {
    LOOM_ASSIGN_OR_RETURN(plan.outputs, IdsField(root, "outputs", "", num_values_, "value"));
  }
  const Json* segments = Find(root, "order_segments");
  if (const Json* order = Find(root, "order")) {
    if (plan.is_factored() && segments != nullptr) {
      LOOM_RETURN_IF_ERROR(ReadFactoredOrder(*segments, *order, plan));
    } else if (plan.is_factored() && !order->empty()) {
      return Error("order", "a factored plan's order needs 'order_segments' (docs/formats.md)");
    } else {
      LOOM_RETURN_IF_ERROR(ReadOrder(*order, plan));
    }
  } else if (segments != nullptr) {
    return Error("order_segments", "given without 'order'");
  }
  if (segments != nullptr && !plan.is_factored()) {
    return Error("order_segments", "only a factored plan's order is written in segments");
  }
  return plan;
}

}  // namespace

// Numbers through nlohmann, which writes a double so that it reads back exactly.
std::string StepSourceJson(const PlanStepSource& s) {
  const TrainingOptions& t = s.training;
  OrderedJson j;
  j["model"] = s.model;
  j["tiny"] = s.tiny;
  j["layers"] = s.layers;
  j["batch"] = s.batch;
  j["seq"] = s.seq;
  j["precision"] = std::string(PrecisionName(t.precision));
  j["microbatches"] = t.microbatches;
  j["max_grad_norm"] = t.max_grad_norm;
  j["optimizer"] = std::string(OptimizerKindName(t.optimizer));
  j["lr"] = t.lr;
  j["beta1"] = t.beta1;
  j["beta2"] = t.beta2;
  j["eps"] = t.eps;
  j["weight_decay"] = t.weight_decay;
  j["optimizer_step"] = t.step;
  return j.dump();
}

std::string PlanToJson(const Plan& plan) {
  std::string out;
  out.reserve(64 + 120 * plan.values.size() + 200 * plan.tasks.size() +
              200 * plan.collectives.size());
  absl::StrAppend(&out, "{\n  \"format\": \"", kFormatName, "\",\n  \"version\": ",
                  kPlanJsonVersion, ",\n  \"model\": ", JsonString(plan.model),
                  ",\n");
  if (plan.step.has_value()) absl::StrAppend(&out, "  \"step\": ", StepSourceJson(*plan.step), ",\n");
  out.append("  \"mesh\": [");
  for (size_t i = 0; i < plan.mesh.axes().size(); ++i) {
    const MeshAxis& a = plan.mesh.axes()[i];
    absl::StrAppend(&out, i > 0 ? "," : "", "{\"name\":", JsonString(a.name), ",\"size\":", a.size,
                    "}");
  }
  out.append("],\n");
  if (plan.factoring.has_value()) {
    const Factoring& f = *plan.factoring;
    absl::StrAppend(&out, "  \"factoring\": {\"dp\":", f.dp, ",\"dp_device_stride\":",
                    f.dp_device_stride, ",\"microbatches\":", f.microbatches, "},\n");
  }
  AppendList(&out, "values", plan.values, AppendValue);
  AppendList(&out, "tasks", plan.tasks, AppendTask);
  AppendList(&out, "collectives", plan.collectives, AppendCollective);
  out.append("  \"outputs\": ");
  AppendIds(&out, plan.outputs);
  out.append(",\n");
  if (plan.is_factored() && !plan.factored_order.programs.empty()) {
    AppendFactoredOrder(&out, plan.factored_order);
  } else {
    AppendList(&out, "order", plan.order, AppendSteps, /*last=*/true);
  }
  out.append("}\n");
  return out;
}

absl::StatusOr<Plan> PlanFromJson(absl::string_view text, absl::string_view filename) {
  try {
    Json root = Json::parse(text.begin(), text.end());
    return PlanReader(filename).Read(root);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": ", JsonExceptionMessage(e)));
  }
}

absl::StatusOr<Plan> LoadPlanFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return PlanFromJson(text, path);
}

absl::Status SavePlanFile(const Plan& plan, const std::string& path) {
  try {
    return WriteFileAtomically(path, PlanToJson(plan));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": ", e.what()));
  }
}

}  // namespace loom::ir
