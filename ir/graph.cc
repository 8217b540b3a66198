#include "ir/graph.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::ir {

absl::string_view TensorRoleName(TensorRole role) {
  switch (role) {
#define LOOM_ROLE_NAME_(e, name) \
  case TensorRole::e:            \
    return name;
    LOOM_TENSOR_ROLE_LIST(LOOM_ROLE_NAME_)
#undef LOOM_ROLE_NAME_
  }
  return "?";
}

absl::StatusOr<TensorRole> ParseTensorRole(absl::string_view name) {
#define LOOM_ROLE_PARSE_(e, text) \
  if (name == text) return TensorRole::e;
  LOOM_TENSOR_ROLE_LIST(LOOM_ROLE_PARSE_)
#undef LOOM_ROLE_PARSE_
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor role '", name, "'"));
}

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
#define LOOM_PHASE_NAME_(e, name) \
  case Phase::e:                  \
    return name;
    LOOM_PHASE_LIST(LOOM_PHASE_NAME_)
#undef LOOM_PHASE_NAME_
  }
  return "?";
}

absl::StatusOr<Phase> ParsePhase(absl::string_view name) {
#define LOOM_PHASE_PARSE_(e, text) \
  if (name == text) return Phase::e;
  LOOM_PHASE_LIST(LOOM_PHASE_PARSE_)
#undef LOOM_PHASE_PARSE_
  return absl::InvalidArgumentError(absl::StrCat("unknown phase '", name, "'"));
}

std::string TensorType::ToString() const {
  return absl::StrCat(DTypeName(dtype), shape.ToString());
}

bool Tensor::operator==(const Tensor& o) const {
  return id == o.id && name == o.name && shape == o.shape && dtype == o.dtype &&
         role == o.role && producer == o.producer && output_index == o.output_index;
}

bool Op::operator==(const Op& o) const {
  return id == o.id && kind == o.kind && inputs == o.inputs && outputs == o.outputs &&
         attrs == o.attrs && info.phase == o.info.phase && info.layer == o.info.layer &&
         info.microbatch == o.info.microbatch;
}

std::string DescribeOp(const Graph& graph, const Op& op) {
  std::string out = absl::StrCat("op '", OpKindName(op.kind), "'");
  if (!op.outputs.empty()) absl::StrAppend(&out, " (", graph.tensor(op.outputs[0]).name, ")");
  return out;
}

absl::StatusOr<TensorId> Graph::NewTensor(std::string name, TensorType type, TensorRole role,
                                          OpId producer, int output_index) {
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is already defined"));
  }
  int64_t bytes = DTypeBytes(type.dtype);
  for (int64_t d : type.shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has negative dim in ",
                                                     type.ToString()));
    }
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > kMaxTensorBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' ", type.ToString(), " is above the ", kMaxTensorBytes >> 50,
          " PiB Loom accepts for one tensor (no device holds it, and its sizes would overflow)"));
    }
  }
  Tensor t;
  t.id = static_cast<TensorId>(tensors_.size());
  t.name = std::move(name);
  t.shape = std::move(type.shape);
  t.dtype = type.dtype;
  t.role = role;
  t.producer = producer;
  t.output_index = output_index;
  by_name_[t.name] = t.id;
  tensors_.push_back(std::move(t));
  consumers_.emplace_back();
  return tensors_.back().id;
}

absl::StatusOr<TensorId> Graph::AddInput(std::string name, Shape shape, DType dtype,
                                         TensorRole role) {
  return NewTensor(std::move(name), TensorType{std::move(shape), dtype}, role, kNoId, -1);
}

bool Graph::SetDimNames(TensorId id, const Shape& named) {
  Tensor& t = tensors_[id];
  if (!t.shape.SameDims(named)) return false;
  t.shape = named;
  return true;
}

absl::StatusOr<std::vector<TensorId>> Graph::AddOp(OpKind kind, std::vector<TensorId> inputs,
                                                   AttrMap attrs, OpInfo info,
                                                   std::vector<OutputSpec> outputs) {
  std::string where = absl::StrCat("op '", OpKindName(kind), "'");
  if (!outputs.empty()) absl::StrAppend(&where, " (", outputs[0].name, ")");
  if (info.layer < -1 || info.layer >= kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": layer ", info.layer,
                                                   " is outside 0..", kMaxLayers - 1));
  }
  if (info.microbatch < -1 || info.microbatch >= kMaxMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": micro-batch ", info.microbatch,
                                                   " is outside 0..", kMaxMicrobatches - 1));
  }
  std::vector<TensorType> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] < 0 || inputs[i] >= num_tensors()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": input ", i, " refers to unknown tensor id ", inputs[i]));
    }
    in_types.push_back(tensors_[inputs[i]].type());
  }
  auto inferred = InferOutputTypes(kind, in_types, attrs);
  if (!inferred.ok()) {
    std::string shapes;
    for (size_t i = 0; i < inputs.size(); ++i) {
      absl::StrAppend(&shapes, i ? ", " : "", "'", tensors_[inputs[i]].name, "' ",
                      in_types[i].ToString());
    }
    return absl::Status(inferred.status().code(),
                        absl::StrCat(where, ": ", inferred.status().message(), " (inputs: ",
                                     shapes, ")"));
  }
  if (outputs.size() != inferred->size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": has ", inferred->size(),
                                                   " outputs, ", outputs.size(),
                                                   " names given"));
  }
  for (const auto& spec : outputs) {
    if (by_name_.contains(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor '", spec.name, "' is already defined"));
    }
  }
  Op op;
  op.id = static_cast<OpId>(ops_.size());
  op.kind = kind;
  op.inputs = std::move(inputs);
  op.attrs = std::move(attrs);
  op.info = info;
  for (size_t i = 0; i < outputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId id,
                          NewTensor(std::move(outputs[i].name), std::move((*inferred)[i]),
                                    outputs[i].role, op.id, static_cast<int>(i)));
    op.outputs.push_back(id);
  }
  successors_.emplace_back();
  for (TensorId in : op.inputs) {
    consumers_[in].push_back(op.id);
    OpId producer = tensors_[in].producer;
    if (producer != kNoId) successors_[producer].push_back(op.id);
  }
  ops_.push_back(std::move(op));
  return ops_.back().outputs;
}

std::string Graph::UniqueName(absl::string_view base) const {
  std::string name(base);
  if (!by_name_.contains(name)) return name;
  // Names are never removed, so every suffix below the one last found for this
  // base is taken: probing resumes there (a base reused n times costs n, not n^2).
  int& next = next_suffix_[name];
  for (int i = std::max(next, 2);; ++i) {
    name = absl::StrCat(base, ".", i);
    if (!by_name_.contains(name)) {
      next = i;
      return name;
    }
  }
}

void Graph::AddOutput(TensorId id) { outputs_.push_back(id); }

std::optional<TensorId> Graph::FindTensor(absl::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<TensorId> Graph::InputIds() const {
  std::vector<TensorId> ids;
  for (const Tensor& t : tensors_) {
    if (t.producer == kNoId) ids.push_back(t.id);
  }
  return ids;
}

int64_t Graph::CountElements(TensorRole role) const {
  int64_t n = 0;
  for (const Tensor& t : tensors_) {
    if (t.producer == kNoId && t.role == role) n += t.shape.num_elements();
  }
  return n;
}

absl::Status Graph::Validate() const {
  for (const Op& op : ops_) {
    std::vector<TensorType> in_types;
    for (TensorId in : op.inputs) {
      LOOM_RET_CHECK(in >= 0 && in < num_tensors()) << DescribeOp(*this, op);
      LOOM_RET_CHECK(tensors_[in].producer < op.id)
          << DescribeOp(*this, op) << " reads a tensor produced later";
      in_types.push_back(tensors_[in].type());
    }
    auto inferred = InferOutputTypes(op.kind, in_types, op.attrs);
    if (!inferred.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeOp(*this, op), ": ", inferred.status().message()));
    }
    if (inferred->size() != op.outputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeOp(*this, op), ": has ",
                                                     op.outputs.size(), " outputs, expected ",
                                                     inferred->size()));
    }
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      const Tensor& t = tensors_[op.outputs[i]];
      if (!t.shape.SameDims((*inferred)[i].shape) || t.dtype != (*inferred)[i].dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            DescribeOp(*this, op), ": output '", t.name, "' is ", t.type().ToString(),
            ", inferred ", (*inferred)[i].ToString()));
      }
      LOOM_RET_CHECK(t.producer == op.id && t.output_index == static_cast<int>(i));
    }
  }
  for (TensorId out : outputs_) LOOM_RET_CHECK(out >= 0 && out < num_tensors());
  return absl::OkStatus();
}

bool Graph::operator==(const Graph& other) const {
  return name_ == other.name_ && tensors_ == other.tensors_ && ops_ == other.ops_ &&
         outputs_ == other.outputs_;
}

}  // namespace loom::ir
