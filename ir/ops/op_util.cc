#include "ir/ops/op_util.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "ir/status_macros.h"

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

absl::StatusOr<std::vector<int64_t>> BroadcastDims(absl::Span<const TensorType> in) {
  int rank = 0;
  for (const TensorType& t : in) rank = std::max(rank, t.shape.rank());
  std::vector<int64_t> out(rank, 1);
  for (size_t i = 0; i < in.size(); ++i) {
    const int offset = rank - in[i].shape.rank();
    for (int d = 0; d < in[i].shape.rank(); ++d) {
      const int64_t size = in[i].shape.dim(d);
      int64_t& o = out[offset + d];
      if (size == o || size == 1) continue;
      if (o != 1) {
        const std::string against =
            i == 1 ? absl::StrCat("input 0's ", in[0].ToString()) : "the inputs before it";
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " is ", in[i].ToString(), ", which does not broadcast with ",
                         against, " (dim ", d, ": ", size, " against ", o, ")"));
      }
      o = size;
    }
  }
  return out;
}

DimSignature BroadcastSignature(absl::Span<const TensorType> in,
                                const std::vector<int64_t>& out_dims, int num_outputs) {
  DimSignature sig;
  const int rank = static_cast<int>(out_dims.size());
  const std::vector<std::string> out_labels = DimLabels(rank);
  for (size_t i = 0; i < in.size(); ++i) {
    const int offset = rank - in[i].shape.rank();
    std::vector<std::string> labels;
    for (int d = 0; d < in[i].shape.rank(); ++d) {
      const int j = offset + d;
      if (in[i].shape.dim(d) == out_dims[j]) {
        labels.push_back(out_labels[j]);
      } else {
        labels.push_back(absl::StrCat("b", i, "_", j));
        sig.broadcasts.emplace_back(labels.back(), out_labels[j]);
      }
    }
    sig.inputs.push_back(std::move(labels));
  }
  sig.outputs.assign(num_outputs, out_labels);
  DefaultSpatial(sig);
  return sig;
}

std::vector<int64_t> BroadcastSource(const std::vector<int64_t>& in_dims,
                                     const std::vector<int64_t>& out_dims) {
  const int rank = static_cast<int>(out_dims.size());
  const int offset = rank - static_cast<int>(in_dims.size());
  // Stride of each output dim in the input (0 where it is broadcast).
  std::vector<int64_t> stride(rank, 0);
  int64_t s = 1;
  for (int d = static_cast<int>(in_dims.size()) - 1; d >= 0; --d) {
    if (in_dims[d] != 1 || out_dims[offset + d] == 1) stride[offset + d] = s;
    s *= in_dims[d];
  }
  int64_t total = 1;
  for (int64_t d : out_dims) total *= d;
  std::vector<int64_t> source(static_cast<size_t>(total), 0);
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;
  for (int64_t e = 0; e < total; ++e) {
    source[e] = at;
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < out_dims[d]) {
        at += stride[d];
        break;
      }
      at -= stride[d] * (out_dims[d] - 1);
      index[d] = 0;
    }
  }
  return source;
}

double ElementCount(const TensorType& t) { return static_cast<double>(t.shape.num_elements()); }

double FlopsPerOutputElement(absl::Span<const TensorType> out, double per_element) {
  return out.empty() ? 0.0 : ElementCount(out[0]) * per_element;
}

TensorType Like(const TensorType& t, std::vector<int64_t> dims) {
  return TensorType{Shape(std::move(dims)), t.dtype};
}

absl::StatusOr<int64_t> LabelSize(const std::map<std::string, int64_t>& label_sizes,
                                  const std::string& label) {
  auto it = label_sizes.find(label);
  LOOM_RET_CHECK(it != label_sizes.end()) << "no size for output label " << label;
  return it->second;
}

absl::StatusOr<AttrMap> ResizeVocab(const AttrMap& attrs, const DimSignature&,
                                    absl::Span<const TensorType>, absl::Span<const TensorType>,
                                    const std::map<std::string, int64_t>& label_sizes) {
  LOOM_ASSIGN_OR_RETURN(int64_t vocab, LabelSize(label_sizes, "v"));
  AttrMap out = attrs;
  out.Set("vocab", vocab);
  return out;
}

}  // namespace loom::ir::ops
