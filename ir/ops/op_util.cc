#include "ir/ops/op_util.h"

#include "absl/strings/str_join.h"

namespace loom::ir::ops {

absl::Status ExpectRank(absl::Span<const TensorType> in, int i, int rank) {
  if (in[i].shape.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " has ", in[i].shape.rank(),
                                                   " dims, expected ", rank));
  }
  return absl::OkStatus();
}

absl::Status ExpectMinRank(absl::Span<const TensorType> in, int i, int rank) {
  if (in[i].shape.rank() < rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " has ", in[i].shape.rank(), " dims, expected at least ", rank));
  }
  return absl::OkStatus();
}

absl::Status ExpectFloat(absl::Span<const TensorType> in, int i) {
  if (!IsFloat(in[i].dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " has dtype ", DTypeName(in[i].dtype), ", expected a float type"));
  }
  return absl::OkStatus();
}

absl::Status ExpectInteger(absl::Span<const TensorType> in, int i) {
  if (IsFloat(in[i].dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " has dtype ", DTypeName(in[i].dtype), ", expected an integer type"));
  }
  return absl::OkStatus();
}

absl::Status ExpectSameType(absl::Span<const TensorType> in, int i, int j) {
  if (!in[i].shape.SameDims(in[j].shape) || in[i].dtype != in[j].dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input ", j, " is ", in[j].ToString(),
                                                   ", expected ", in[i].ToString(),
                                                   " like input ", i));
  }
  return absl::OkStatus();
}

absl::Status ExpectScalar(absl::Span<const TensorType> in, int i) {
  if (in[i].shape.rank() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input ", i, " is ", in[i].ToString(), ", expected a scalar"));
  }
  return absl::OkStatus();
}

absl::Status ExpectDims(absl::Span<const TensorType> in, int i,
                        const std::vector<int64_t>& dims) {
  if (in[i].shape.dims() != dims) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", in[i].ToString(),
                                                   ", expected dims [",
                                                   absl::StrJoin(dims, ","), "]"));
  }
  return absl::OkStatus();
}

std::vector<std::string> DimLabels(int rank, absl::string_view prefix) {
  std::vector<std::string> labels;
  for (int i = 0; i < rank; ++i) labels.push_back(absl::StrCat(prefix, i));
  return labels;
}

DimSignature ElementwiseSignature(int rank, int num_inputs, int num_outputs) {
  DimSignature sig;
  std::vector<std::string> labels = DimLabels(rank);
  sig.inputs.assign(num_inputs, labels);
  sig.outputs.assign(num_outputs, labels);
  DefaultSpatial(sig);
  return sig;
}

void DefaultSpatial(DimSignature& sig) {
  for (const auto* side : {&sig.inputs, &sig.outputs}) {
    for (const auto& labels : *side) {
      for (const auto& l : labels) sig.kinds.emplace(l, DimKind::kSpatial);
    }
  }
}

double ElementCount(const TensorType& t) { return static_cast<double>(t.shape.num_elements()); }

double FlopsPerOutputElement(absl::Span<const TensorType> out, double per_element) {
  return out.empty() ? 0.0 : ElementCount(out[0]) * per_element;
}

TensorType Like(const TensorType& t, std::vector<int64_t> dims) {
  return TensorType{Shape(std::move(dims)), t.dtype};
}

}  // namespace loom::ir::ops
