#include "ir/op_schema.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/name_suggestion.h"
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
  table.CheckDeclarations();
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
    if (kind == DimKind::kLogSumExpReduction) {
      notes.push_back(absl::StrCat(label, ":logsumexp"));
    }
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

namespace {

// The attribute names of a schema's doc: "name(inputs) {a, b=1, c?} -> ..." gives
// a, b and c (each item's leading identifier).
std::vector<std::string> DocAttributes(const std::string& doc) {
  std::vector<std::string> names;
  const size_t close = doc.find(')');
  const size_t open = doc.find('{', close == std::string::npos ? 0 : close);
  const size_t arrow = doc.find("->");
  if (open == std::string::npos || (arrow != std::string::npos && open > arrow)) return names;
  const size_t end = doc.find('}', open);
  if (end == std::string::npos) return names;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(doc).substr(open + 1, end - open - 1), ',')) {
    item = absl::StripAsciiWhitespace(item);
    size_t n = 0;
    while (n < item.size() && (absl::ascii_isalnum(item[n]) || item[n] == '_')) ++n;
    if (n > 0) names.emplace_back(item.substr(0, n));
  }
  return names;
}

absl::Status CheckAttributeNames(const OpSchema& schema, const AttrMap& attrs) {
  for (const auto& entry : attrs.values()) {
    const std::string& name = entry.first;
    if (std::find(schema.attributes.begin(), schema.attributes.end(), name) !=
        schema.attributes.end()) {
      continue;
    }
    std::string known = schema.attributes.empty()
                            ? "it has none"
                            : absl::StrCat("its attributes: ", absl::StrJoin(schema.attributes, ", "));
    if (std::optional<std::string> meant = ClosestName(name, schema.attributes)) {
      known = absl::StrCat("did you mean '", *meant, "'? (", known, ")");
    }
    return absl::InvalidArgumentError(absl::StrCat("'", OpKindName(schema.kind),
                                                   "' has no attribute '", name, "'; ", known));
  }
  return absl::OkStatus();
}

}  // namespace

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
  const OpSchema& schema = GetOpSchema(kind);
  LOOM_RETURN_IF_ERROR(CheckAttributeNames(schema, attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorType> out, schema.infer(in, attrs));
  if (arity.num_outputs >= 0) {
    LOOM_RET_CHECK(static_cast<int>(out.size()) == arity.num_outputs)
        << OpKindName(kind) << " inferred " << out.size() << " outputs";
  }
  return out;
}

OpSchema& SchemaTable::Register(OpSchema schema) {
  if (schema.attributes.empty()) schema.attributes = DocAttributes(schema.doc);
  int index = static_cast<int>(schema.kind);
  if (schemas_[index].has_value()) {
    std::cerr << "loom: op '" << OpKindName(schema.kind) << "' registered twice\n";
    std::abort();
  }
  schemas_[index] = std::move(schema);
  return *schemas_[index];
}

void SchemaTable::CheckDeclarations() const {
  for (const std::optional<OpSchema>& s : schemas_) {
    if (!s.has_value()) continue;
    for (const AttrUse& use : s->attr_roles) {
      if (std::find(s->attributes.begin(), s->attributes.end(), use.name) == s->attributes.end()) {
        std::cerr << "loom: op '" << OpKindName(s->kind) << "' declares a role for attribute '"
                  << use.name << "', which it does not read\n";
        std::abort();
      }
    }
  }
}

OpSchema& OpSchema::Linear(std::vector<std::vector<int>> groups) {
  linear_in = std::move(groups);
  return *this;
}

OpSchema& OpSchema::LinearInEveryInput() {
  linear_in_every_input = true;
  return *this;
}

OpSchema& OpSchema::LinearIntoFloatsOnly() {
  linear_into_floats_only = true;
  return *this;
}

OpSchema& OpSchema::Homogeneous(std::vector<int> positions, int exponent) {
  homogeneous_in.push_back({std::move(positions), exponent});
  return *this;
}

OpSchema& OpSchema::SumsOperands() {
  sums_operands = true;
  return *this;
}

OpSchema& OpSchema::Attr(std::string name, AttrRole role) {
  attr_roles.push_back({std::move(name), role});
  return *this;
}

OpSchema& OpSchema::Resizes(ResizeAttrsFn fn) {
  resize_attrs = fn;
  return *this;
}

OpSchema& OpSchema::RoutesTokens() {
  routes_tokens = true;
  return *this;
}

OpSchema& OpSchema::Causal(std::string queries, std::string keys) {
  causal_mask = CausalMask{std::move(queries), std::move(keys)};
  return *this;
}

OpSchema& OpSchema::SameComputation(SameComputationFn fn) {
  same_computation = fn;
  return *this;
}

std::optional<int64_t> CausalShift(const OpSchema& schema, const AttrMap& attrs) {
  if (!schema.causal_mask.has_value() || attrs.GetInt("causal", 1).value_or(1) != 1) {
    return std::nullopt;
  }
  return attrs.GetInt("q_offset", 0).value_or(0) - attrs.GetInt("k_offset", 0).value_or(0);
}

std::optional<AttrRole> OpSchema::RoleOf(absl::string_view name) const {
  for (const AttrUse& use : attr_roles) {
    if (use.name == name) return use.role;
  }
  return std::nullopt;
}

const OpSchema* SchemaTable::Find(OpKind kind) const {
  const auto& s = schemas_[static_cast<int>(kind)];
  return s.has_value() ? &*s : nullptr;
}

}  // namespace loom::ir
