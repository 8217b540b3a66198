#include "ir/json_format.h"

#include <climits>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"
#include "ir/text_format.h"
#include "nlohmann/json.hpp"

namespace loom::ir {
namespace {

constexpr absl::string_view kFormatName = "loom.graph";

// ---- writing -------------------------------------------------------------------

OrderedJson TensorToJson(const Tensor& t) {
  OrderedJson j;
  j["id"] = t.id;
  j["name"] = t.name;
  j["dtype"] = std::string(DTypeName(t.dtype));
  j["shape"] = t.shape.dims();
  if (t.shape.has_names()) j["dim_names"] = t.shape.names();
  j["role"] = std::string(TensorRoleName(t.role));
  j["producer"] = t.producer;
  j["output_index"] = t.output_index;
  return j;
}

OrderedJson OpToJson(const Op& op) {
  OrderedJson j;
  j["id"] = op.id;
  j["kind"] = std::string(OpKindName(op.kind));
  j["inputs"] = op.inputs;
  j["outputs"] = op.outputs;
  j["attrs"] = OrderedJson::object();
  for (const auto& [name, value] : op.attrs.values()) j["attrs"][name] = AttrToJson(value);
  j["phase"] = std::string(PhaseName(op.info.phase));
  j["layer"] = op.info.layer;
  j["microbatch"] = op.info.microbatch;
  return j;
}

// "[\n    {...},\n    {...}\n  ]": one record per line keeps files diffable.
template <typename T, typename F>
std::string RecordList(absl::Span<const T> items, F to_json) {
  if (items.empty()) return "[]";
  std::string out = "[\n";
  for (size_t i = 0; i < items.size(); ++i) {
    absl::StrAppend(&out, "    ", DumpJson(to_json(items[i])),
                    i + 1 < items.size() ? ",\n" : "\n");
  }
  out += "  ]";
  return out;
}

// ---- reading -------------------------------------------------------------------

struct TensorRecord {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  TensorRole role = TensorRole::kActivation;
  int producer = kNoId;
  int output_index = -1;
};

struct OpRecord {
  OpKind kind = OpKind::kAdd;
  std::vector<int> inputs;
  std::vector<int> outputs;
  AttrMap attrs;
  OpInfo info;
};

// Reads a parsed document, naming the JSON path of every error.
class Reader : public JsonReader {
 public:
  explicit Reader(absl::string_view filename) : JsonReader(filename) {}

  absl::StatusOr<Graph> Read(const Json& root);

 private:
  absl::StatusOr<TensorRecord> ReadTensor(const Json& j, int index, int num_ops) const;
  absl::StatusOr<OpRecord> ReadOp(const Json& j, int index) const;
  absl::Status AddOp(Graph& graph, const std::vector<TensorRecord>& tensors,
                     const OpRecord& op, int index, int next_tensor) const;
};

absl::StatusOr<TensorRecord> Reader::ReadTensor(const Json& j, int index, int num_ops) const {
  std::string path = absl::StrCat("tensors[", index, "]");
  if (!j.is_object()) return Error(path, "expected an object");
  auto at = [&](absl::string_view key) { return absl::StrCat(path, ".", key); };
  TensorRecord t;
  LOOM_ASSIGN_OR_RETURN(const Json* id, Field(j, "id", path));
  LOOM_ASSIGN_OR_RETURN(int64_t id_value, Int(*id, at("id")));
  if (id_value != index) {
    return Error(at("id"), absl::StrCat("expected ", index, ", got ", id_value,
                                        " (tensor ids are dense and in order)"));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* name, Field(j, "name", path));
  LOOM_ASSIGN_OR_RETURN(t.name, String(*name, at("name")));
  LOOM_ASSIGN_OR_RETURN(const Json* dtype, Field(j, "dtype", path));
  LOOM_ASSIGN_OR_RETURN(std::string dtype_name, String(*dtype, at("dtype")));
  auto parsed_dtype = ParseDType(dtype_name);
  if (!parsed_dtype.ok()) return Error(at("dtype"), parsed_dtype.status().message());
  t.dtype = *parsed_dtype;
  LOOM_ASSIGN_OR_RETURN(const Json* shape, Field(j, "shape", path));
  LOOM_RETURN_IF_ERROR(ExpectArray(*shape, at("shape")));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < shape->size(); ++i) {
    std::string dim_path = absl::StrCat(at("shape"), "[", i, "]");
    LOOM_ASSIGN_OR_RETURN(int64_t d, Int((*shape)[i], dim_path));
    if (d < 0) return Error(dim_path, absl::StrCat("negative dim ", d));
    dims.push_back(d);
  }
  std::vector<std::string> names;
  if (auto it = j.find("dim_names"); it != j.end()) {
    LOOM_RETURN_IF_ERROR(ExpectArray(*it, at("dim_names")));
    if (it->size() != dims.size()) {
      return Error(at("dim_names"), absl::StrCat("has ", it->size(), " names for ",
                                                 dims.size(), " dims"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::string n,
                            String((*it)[i], absl::StrCat(at("dim_names"), "[", i, "]")));
      names.push_back(std::move(n));
    }
  }
  t.shape = Shape(std::move(dims), std::move(names));
  LOOM_ASSIGN_OR_RETURN(const Json* role, Field(j, "role", path));
  LOOM_ASSIGN_OR_RETURN(std::string role_name, String(*role, at("role")));
  auto parsed_role = ParseTensorRole(role_name);
  if (!parsed_role.ok()) return Error(at("role"), parsed_role.status().message());
  t.role = *parsed_role;
  LOOM_ASSIGN_OR_RETURN(const Json* producer, Field(j, "producer", path));
  LOOM_ASSIGN_OR_RETURN(t.producer, Int32(*producer, at("producer")));
  if (t.producer < kNoId || t.producer >= num_ops) {
    return Error(at("producer"), absl::StrCat("unknown op id ", t.producer));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* output_index, Field(j, "output_index", path));
  LOOM_ASSIGN_OR_RETURN(t.output_index, Int32(*output_index, at("output_index")));
  return t;
}

absl::StatusOr<OpRecord> Reader::ReadOp(const Json& j, int index) const {
  std::string path = absl::StrCat("ops[", index, "]");
  if (!j.is_object()) return Error(path, "expected an object");
  auto at = [&](absl::string_view key) { return absl::StrCat(path, ".", key); };
  OpRecord op;
  LOOM_ASSIGN_OR_RETURN(const Json* id, Field(j, "id", path));
  LOOM_ASSIGN_OR_RETURN(int64_t id_value, Int(*id, at("id")));
  if (id_value != index) {
    return Error(at("id"), absl::StrCat("expected ", index, ", got ", id_value,
                                        " (op ids are dense and in order)"));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* kind, Field(j, "kind", path));
  LOOM_ASSIGN_OR_RETURN(std::string kind_name, String(*kind, at("kind")));
  auto parsed_kind = ParseOpKind(kind_name);
  if (!parsed_kind.ok()) return Error(at("kind"), parsed_kind.status().message());
  op.kind = *parsed_kind;
  LOOM_ASSIGN_OR_RETURN(const Json* inputs, Field(j, "inputs", path));
  LOOM_ASSIGN_OR_RETURN(op.inputs, IdList(*inputs, at("inputs")));
  LOOM_ASSIGN_OR_RETURN(const Json* outputs, Field(j, "outputs", path));
  LOOM_ASSIGN_OR_RETURN(op.outputs, IdList(*outputs, at("outputs")));
  if (auto it = j.find("attrs"); it != j.end()) {
    if (!it->is_object()) return Error(at("attrs"), "expected an object");
    for (auto attr = it->begin(); attr != it->end(); ++attr) {
      LOOM_ASSIGN_OR_RETURN(AttrValue value,
                            Attr(attr.value(), absl::StrCat(at("attrs"), ".", attr.key())));
      op.attrs.Set(attr.key(), std::move(value));
    }
  }
  LOOM_ASSIGN_OR_RETURN(const Json* phase, Field(j, "phase", path));
  LOOM_ASSIGN_OR_RETURN(std::string phase_name, String(*phase, at("phase")));
  auto parsed_phase = ParsePhase(phase_name);
  if (!parsed_phase.ok()) return Error(at("phase"), parsed_phase.status().message());
  op.info.phase = *parsed_phase;
  if (auto it = j.find("layer"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(op.info.layer, Int32(*it, at("layer")));
  }
  if (auto it = j.find("microbatch"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(op.info.microbatch, Int32(*it, at("microbatch")));
  }
  return op;
}

// Adds op `index`, whose outputs must be the tensors numbered from `next_tensor` on,
// and checks the recorded output types against shape inference.
absl::Status Reader::AddOp(Graph& graph, const std::vector<TensorRecord>& tensors,
                           const OpRecord& op, int index, int next_tensor) const {
  std::string path = absl::StrCat("ops[", index, "]");
  const int num_tensors = static_cast<int>(tensors.size());
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    std::string in_path = absl::StrCat(path, ".inputs[", i, "]");
    int id = op.inputs[i];
    if (id < 0 || id >= num_tensors) {
      return Error(in_path, absl::StrCat("unknown tensor id ", id));
    }
    if (id >= next_tensor) {
      return Error(in_path, absl::StrCat("tensor id ", id,
                                         " is defined after the op (ids must follow "
                                         "creation order)"));
    }
  }
  std::vector<OutputSpec> specs;
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    std::string out_path = absl::StrCat(path, ".outputs[", i, "]");
    int id = op.outputs[i];
    if (id < 0 || id >= num_tensors) {
      return Error(out_path, absl::StrCat("unknown tensor id ", id));
    }
    int want = next_tensor + static_cast<int>(i);
    if (id != want) {
      return Error(out_path, absl::StrCat("expected tensor id ", want, ", got ", id,
                                          " (an op's outputs follow it in id order)"));
    }
    const TensorRecord& t = tensors[id];
    if (t.producer != index) {
      return Error(absl::StrCat("tensors[", id, "].producer"),
                   absl::StrCat("expected ", index, " (it is output ", i, " of ", path,
                                "), got ", t.producer));
    }
    if (t.output_index != static_cast<int>(i)) {
      return Error(absl::StrCat("tensors[", id, "].output_index"),
                   absl::StrCat("expected ", i, ", got ", t.output_index));
    }
    specs.push_back({t.name, t.role});
  }
  std::vector<TensorId> inputs(op.inputs.begin(), op.inputs.end());
  auto ids = graph.AddOp(op.kind, std::move(inputs), op.attrs, op.info, std::move(specs));
  if (!ids.ok()) return Wrap(path, ids.status());
  for (size_t i = 0; i < ids->size(); ++i) {
    const Tensor& made = graph.tensor((*ids)[i]);
    const TensorRecord& t = tensors[made.id];
    TensorType recorded{t.shape, t.dtype};
    if (!made.shape.SameDims(t.shape) || made.dtype != t.dtype) {
      return Error(absl::StrCat("tensors[", made.id, "]"),
                   absl::StrCat("type ", recorded.ToString(), " does not match ",
                                made.type().ToString(), " inferred for ", path));
    }
    graph.SetDimNames(made.id, t.shape);
  }
  return absl::OkStatus();
}

absl::StatusOr<Graph> Reader::Read(const Json& root) {
  if (!root.is_object()) return Error("", "expected a JSON object");
  LOOM_ASSIGN_OR_RETURN(const Json* format, Field(root, "format", ""));
  LOOM_ASSIGN_OR_RETURN(std::string format_name, String(*format, "format"));
  if (format_name != kFormatName) {
    return Error("format", absl::StrCat("expected \"", kFormatName, "\", got \"",
                                        format_name, "\""));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* version, Field(root, "version", ""));
  LOOM_ASSIGN_OR_RETURN(int64_t version_value, Int(*version, "version"));
  if (version_value != kGraphJsonVersion) {
    return Error("version", absl::StrCat("unsupported version ", version_value,
                                         " (this reader handles ", kGraphJsonVersion, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(const Json* name, Field(root, "name", ""));
  LOOM_ASSIGN_OR_RETURN(std::string graph_name, String(*name, "name"));
  LOOM_ASSIGN_OR_RETURN(const Json* tensors_json, Field(root, "tensors", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*tensors_json, "tensors"));
  LOOM_ASSIGN_OR_RETURN(const Json* ops_json, Field(root, "ops", ""));
  LOOM_RETURN_IF_ERROR(ExpectArray(*ops_json, "ops"));
  LOOM_ASSIGN_OR_RETURN(const Json* outputs_json, Field(root, "outputs", ""));
  LOOM_ASSIGN_OR_RETURN(std::vector<int> outputs, IdList(*outputs_json, "outputs"));
  if (tensors_json->size() > INT_MAX || ops_json->size() > INT_MAX) {
    return Error("", "too many tensors or ops");
  }
  const int num_tensors = static_cast<int>(tensors_json->size());
  const int num_ops = static_cast<int>(ops_json->size());

  std::vector<TensorRecord> tensors;
  for (int i = 0; i < num_tensors; ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorRecord t, ReadTensor((*tensors_json)[i], i, num_ops));
    tensors.push_back(std::move(t));
  }
  std::vector<OpRecord> ops;
  for (int i = 0; i < num_ops; ++i) {
    LOOM_ASSIGN_OR_RETURN(OpRecord op, ReadOp((*ops_json)[i], i));
    ops.push_back(std::move(op));
  }

  // Rebuild in creation order: the tensors without producer that come next, then
  // the next op with its outputs.
  Graph graph(graph_name);
  int next = 0;
  auto add_inputs = [&]() -> absl::Status {
    for (; next < num_tensors && tensors[next].producer == kNoId; ++next) {
      const TensorRecord& t = tensors[next];
      auto id = graph.AddInput(t.name, t.shape, t.dtype, t.role);
      if (!id.ok()) return Wrap(absl::StrCat("tensors[", next, "]"), id.status());
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < num_ops; ++i) {
    LOOM_RETURN_IF_ERROR(add_inputs());
    LOOM_RETURN_IF_ERROR(AddOp(graph, tensors, ops[i], i, next));
    next += static_cast<int>(ops[i].outputs.size());
  }
  LOOM_RETURN_IF_ERROR(add_inputs());
  if (next < num_tensors) {
    return Error(absl::StrCat("tensors[", next, "].producer"),
                 absl::StrCat("op ", tensors[next].producer,
                              " does not list this tensor among its outputs"));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i] < 0 || outputs[i] >= num_tensors) {
      return Error(absl::StrCat("outputs[", i, "]"),
                   absl::StrCat("unknown tensor id ", outputs[i]));
    }
    graph.AddOutput(outputs[i]);
  }
  return graph;
}

}  // namespace

std::string GraphToJson(const Graph& graph) {
  OrderedJson header;
  header["format"] = std::string(kFormatName);
  header["version"] = kGraphJsonVersion;
  header["name"] = graph.name();
  std::string out = "{\n";
  for (auto it = header.begin(); it != header.end(); ++it) {
    absl::StrAppend(&out, "  ", DumpJson(it.key()), ": ", DumpJson(it.value()), ",\n");
  }
  absl::StrAppend(&out, "  \"tensors\": ", RecordList(graph.tensors(), TensorToJson), ",\n");
  absl::StrAppend(&out, "  \"ops\": ", RecordList(graph.ops(), OpToJson), ",\n");
  absl::StrAppend(&out, "  \"outputs\": ", DumpJson(OrderedJson(graph.outputs())), "\n}\n");
  return out;
}

absl::StatusOr<Graph> GraphFromJson(absl::string_view text, absl::string_view filename) {
  try {
    Json root = Json::parse(text.begin(), text.end());
    return Reader(filename).Read(root);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": ", JsonExceptionMessage(e)));
  }
}

absl::StatusOr<Graph> LoadGraphFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  for (char c : text) {
    if (absl::ascii_isspace(c)) continue;
    if (c == '{') return GraphFromJson(text, path);
    break;
  }
  return ParseGraph(text, path);
}

absl::Status SaveGraphFile(const Graph& graph, const std::string& path) {
  const std::string text =
      absl::EndsWith(path, ".json") ? GraphToJson(graph) : PrintGraph(graph);
  return WriteFileAtomically(path, text);
}

}  // namespace loom::ir
