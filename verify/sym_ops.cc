#include "verify/sym_ops.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"

namespace loom::verify {
namespace {

const std::vector<std::optional<SymKernel>>& Table() {
  static const auto* table = [] {
    auto* t = new std::vector<std::optional<SymKernel>>(ir::kNumOpKinds);
    for (auto family : {internal::ElementwiseSymKernels, internal::ShapeSymKernels,
                        internal::MatmulSymKernels, internal::ReduceSymKernels,
                        internal::AttentionSymKernels, internal::LossSymKernels,
                        internal::MoeSymKernels, internal::NormSymKernels,
                        internal::OptimizerSymKernels, internal::PointwiseSymKernels,
                        internal::IndexSymKernels}) {
      for (const SymKernel& k : family()) (*t)[static_cast<int>(k.kind)] = k;
    }
    return t;
  }();
  return *table;
}

}  // namespace

bool HasSymbolicSemantics(ir::OpKind kind) {
  return Table()[static_cast<int>(kind)].has_value();
}

int SemanticsVersion(ir::OpKind kind) {
  const auto& k = Table()[static_cast<int>(kind)];
  return k.has_value() ? k->version : 0;
}

absl::StatusOr<std::vector<SymTensor>> EvalSymbolic(smt::Terms& terms, ir::OpKind kind,
                                                    absl::Span<const SymTensor* const> in,
                                                    const ir::AttrMap& attrs) {
  const auto& k = Table()[static_cast<int>(kind)];
  if (!k.has_value()) {
    return absl::UnimplementedError(
        absl::StrCat("op '", ir::OpKindName(kind), "' has no symbolic semantics"));
  }
  std::vector<ir::TensorType> in_types;
  in_types.reserve(in.size());
  for (const SymTensor* t : in) {
    if (static_cast<int64_t>(t->data.size()) != t->shape.num_elements()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", ir::OpKindName(kind), "': a symbolic input holds ", t->data.size(),
          " terms for shape ", t->shape.ToString()));
    }
    in_types.push_back(ir::TensorType{t->shape, t->dtype});
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> out_types,
                        ir::InferOutputTypes(kind, in_types, attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<SymTensor> out, k->fn(terms, in, attrs, out_types));
  if (out.size() != out_types.size()) {
    return absl::InternalError(absl::StrCat("op '", ir::OpKindName(kind), "': symbolic kernel gave ",
                                            out.size(), " outputs, expected ", out_types.size()));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!(out[i].shape == out_types[i].shape) ||
        static_cast<int64_t>(out[i].data.size()) != out_types[i].shape.num_elements()) {
      return absl::InternalError(absl::StrCat("op '", ir::OpKindName(kind),
                                              "': symbolic output ", i, " has the wrong shape"));
    }
  }
  return out;
}

}  // namespace loom::verify
