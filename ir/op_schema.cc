#include "ir/op_schema.h"

#include <cstdlib>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

SchemaTable BuildTable() {
  SchemaTable table;
  RegisterElementwiseOps(table);
  RegisterReduceOps(table);
  RegisterLossOps(table);
  RegisterNormOps(table);
  RegisterMatMulOps(table);
  RegisterAttentionOps(table);
  RegisterShapeOps(table);
  RegisterMoeOps(table);
  RegisterOptimizerOps(table);
  RegisterPointwiseOps(table);
  RegisterIndexOps(table);
  return table;
}

const SchemaTable& Table() {
  static const SchemaTable* table = new SchemaTable(BuildTable());
  return *table;
}

}  // namespace

std::string DimSignature::ToString() const {
  auto side = [](const std::vector<std::vector<std::string>>& tensors) {
    std::vector<std::string> parts;
    for (const auto& labels : tensors) parts.push_back(absl::StrJoin(labels, " "));
    return absl::StrJoin(parts, ", ");
  };
  std::string out = absl::StrCat(side(inputs), " -> ", side(outputs));
  std::vector<std::string> notes;
  for (const auto& [label, kind] : kinds) {
    if (kind == DimKind::kReduction) notes.push_back(absl::StrCat(label, ":reduce"));
    if (kind == DimKind::kMaxReduction) notes.push_back(absl::StrCat(label, ":max"));
    if (kind == DimKind::kFixed) notes.push_back(absl::StrCat(label, ":fixed"));
  }
  for (const auto& group : coupled) {
    notes.push_back(absl::StrCat("coupled(", absl::StrJoin(group, ","), ")"));
  }
  if (!notes.empty()) absl::StrAppend(&out, " | ", absl::StrJoin(notes, " "));
  return out;
}

absl::StatusOr<TensorId> GradBuilder::Emit1(OpKind kind, std::vector<TensorId> inputs,
                                            AttrMap attrs, absl::string_view name) {
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                        Emit(kind, std::move(inputs), std::move(attrs), name));
  LOOM_RET_CHECK(outs.size() == 1) << OpKindName(kind) << " has " << outs.size()
                                   << " outputs";
  return outs[0];
}

std::string GradBuilder::GradName(int i) const {
  return absl::StrCat("d.", graph().tensor(input(i)).name);
}

absl::StatusOr<TensorId> GradBuilder::GradOutputOrZeros(int i) {
  if (auto g = grad_output(i)) return *g;
  const Tensor& t = graph().tensor(output(i));
  AttrMap attrs;
  attrs.Set("shape", t.shape.dims());
  attrs.Set("value", 0.0);
  attrs.Set("dtype", std::string(DTypeName(t.dtype)));
  return Emit1(OpKind::kFill, {}, std::move(attrs), absl::StrCat("d.", t.name));
}

const OpSchema& GetOpSchema(OpKind kind) {
  const OpSchema* schema = Table().Find(kind);
  if (schema == nullptr) {
    // A missing schema is a build defect caught by the registry test; fail loudly.
    std::cerr << "loom: op '" << OpKindName(kind) << "' has no schema\n";
    std::abort();
  }
  return *schema;
}

absl::StatusOr<std::vector<TensorType>> InferOutputTypes(OpKind kind,
                                                         absl::Span<const TensorType> in,
                                                         const AttrMap& attrs) {
  OpArity arity = GetOpArity(kind);
  int n = static_cast<int>(in.size());
  if (n < arity.min_inputs || (arity.max_inputs >= 0 && n > arity.max_inputs)) {
    std::string want = arity.max_inputs < 0 ? absl::StrCat("at least ", arity.min_inputs)
                       : arity.min_inputs == arity.max_inputs
                           ? absl::StrCat(arity.min_inputs)
                           : absl::StrCat(arity.min_inputs, " to ", arity.max_inputs);
    return absl::InvalidArgumentError(
        absl::StrCat("takes ", want, " inputs, got ", n));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorType> out, GetOpSchema(kind).infer(in, attrs));
  if (arity.num_outputs >= 0) {
    LOOM_RET_CHECK(static_cast<int>(out.size()) == arity.num_outputs)
        << OpKindName(kind) << " inferred " << out.size() << " outputs";
  }
  return out;
}

void SchemaTable::Register(OpSchema schema) {
  int index = static_cast<int>(schema.kind);
  if (schemas_[index].has_value()) {
    std::cerr << "loom: op '" << OpKindName(schema.kind) << "' registered twice\n";
    std::abort();
  }
  schemas_[index] = std::move(schema);
}

const OpSchema* SchemaTable::Find(OpKind kind) const {
  const auto& s = schemas_[static_cast<int>(kind)];
  return s.has_value() ? &*s : nullptr;
}

}  // namespace loom::ir
