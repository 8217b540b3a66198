// Ops over positions: arange (a tensor of its own positions), cumsum (running
// sums along a dim) and index (advanced indexing: a gather by index tensors).

#include <algorithm>
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "ir/ops/op_util.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::FlopsPerOutputElement;

// ---- arange -------------------------------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferArange(absl::Span<const TensorType>,
                                                    const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("start").status());
  LOOM_RETURN_IF_ERROR(attrs.GetFloat("step").status());
  LOOM_ASSIGN_OR_RETURN(int64_t size, attrs.GetInt("size"));
  LOOM_ASSIGN_OR_RETURN(std::string name, attrs.GetString("dtype", "i64"));
  LOOM_ASSIGN_OR_RETURN(DType dtype, ParseDType(name));
  if (size < 0) return absl::InvalidArgumentError("attribute 'size' is negative");
  return std::vector<TensorType>{TensorType{Shape({size}), dtype}};
}

absl::StatusOr<DimSignature> SignatureArange(absl::Span<const TensorType>, const AttrMap&) {
  return ops::ElementwiseSignature(1, 0);
}

absl::Status KernelArange(absl::Span<const HostTensor* const>, const AttrMap& attrs,
                          absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(double start, attrs.GetFloat("start"));
  LOOM_ASSIGN_OR_RETURN(double step, attrs.GetFloat("step"));
  for (int64_t i = 0; i < out[0].size(); ++i) out[0][i] = start + static_cast<double>(i) * step;
  return absl::OkStatus();
}

// A piece over positions [b, e) starts at start + b * step and has e - b of them.
absl::StatusOr<AttrMap> ShardAttrsArange(const AttrMap& attrs, absl::Span<const TensorType>,
                                         absl::Span<const Box>, absl::Span<const TensorType>,
                                         absl::Span<const Box> out_boxes) {
  if (out_boxes.size() != 1 || out_boxes[0].size() != 1) {
    return absl::InvalidArgumentError("arange piece needs one output box of 1 dim");
  }
  LOOM_ASSIGN_OR_RETURN(double start, attrs.GetFloat("start"));
  LOOM_ASSIGN_OR_RETURN(double step, attrs.GetFloat("step"));
  AttrMap piece = attrs;
  const double begin = start + static_cast<double>(out_boxes[0][0].begin) * step;
  // An integer start stays an integer attribute.
  const AttrValue* written = attrs.Find("start");
  if (written != nullptr && std::holds_alternative<int64_t>(*written) &&
      begin == std::floor(begin)) {
    piece.Set("start", static_cast<int64_t>(begin));
  } else {
    piece.Set("start", begin);
  }
  piece.Set("size", out_boxes[0][0].size());
  return piece;
}

// ---- cumsum ---------------------------------------------------------------------------

absl::StatusOr<int> CumsumDim(const TensorType& t, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  return NormalizeDim(dim, t.shape.rank());
}

absl::StatusOr<std::vector<TensorType>> InferCumsum(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_RETURN_IF_ERROR(CumsumDim(in[0], attrs).status());
  return std::vector<TensorType>{in[0]};
}

// The summed dim is fixed: a piece of it would restart the running sum.
absl::StatusOr<DimSignature> SignatureCumsum(absl::Span<const TensorType> in,
                                             const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, CumsumDim(in[0], attrs));
  DimSignature sig = ops::ElementwiseSignature(in[0].shape.rank(), 1);
  sig.kinds[sig.inputs[0][dim]] = DimKind::kFixed;
  return sig;
}

absl::Status KernelCumsum(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                          absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, CumsumDim(TensorType{x.shape, x.dtype}, attrs));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.shape.dim(d);
  for (int d = dim + 1; d < x.shape.rank(); ++d) inner *= x.shape.dim(d);
  const int64_t n = x.shape.dim(dim);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = (o * n + k) * inner + i;
        acc += x[at];
        out[0][at] = acc;
      }
    }
  }
  return absl::OkStatus();
}

// ---- index ------------------------------------------------------------------------------

// index(x, i0, ..., i{k-1}): the k index tensors (integer) broadcast to dims P
// and address x's first k dims; the result has dims P followed by x's other dims.
absl::StatusOr<std::vector<TensorType>> InferIndex(absl::Span<const TensorType> in,
                                                   const AttrMap&) {
  const int k = static_cast<int>(in.size()) - 1;
  if (k > in[0].shape.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(k, " index tensors for input 0 of ",
                                                   in[0].shape.rank(), " dims"));
  }
  for (int m = 1; m <= k; ++m) {
    if (IsFloat(in[m].dtype) || in[m].dtype == DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat("input ", m, " has dtype ",
                                                     DTypeName(in[m].dtype),
                                                     ", expected an integer index type"));
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ops::BroadcastDims(in.subspan(1)));
  for (int d = k; d < in[0].shape.rank(); ++d) dims.push_back(in[0].shape.dim(d));
  return std::vector<TensorType>{TensorType{Shape(std::move(dims)), in[0].dtype}};
}

// x's indexed dims are fixed (a piece of them would miss the rows an index
// names); the index tensors' dims and x's other dims are spatial.
absl::StatusOr<DimSignature> SignatureIndex(absl::Span<const TensorType> in, const AttrMap&) {
  const int k = static_cast<int>(in.size()) - 1;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> p, ops::BroadcastDims(in.subspan(1)));
  DimSignature idx = ops::BroadcastSignature(in.subspan(1), p);
  DimSignature sig;
  std::vector<std::string> x;
  for (int m = 0; m < k; ++m) {
    x.push_back(absl::StrCat("x", m));
    sig.kinds[x.back()] = DimKind::kFixed;
  }
  std::vector<std::string> out = idx.outputs[0];
  for (int d = k; d < in[0].shape.rank(); ++d) {
    x.push_back(absl::StrCat("r", d));
    out.push_back(x.back());
  }
  sig.inputs.push_back(std::move(x));
  for (auto& labels : idx.inputs) sig.inputs.push_back(std::move(labels));
  sig.outputs.push_back(std::move(out));
  ops::DefaultSpatial(sig);
  return sig;
}

absl::Status KernelIndex(absl::Span<const HostTensor* const> in, const AttrMap&,
                         absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const int k = static_cast<int>(in.size()) - 1;
  std::vector<int64_t> p_dims(out[0].shape.dims().begin(), out[0].shape.dims().end() -
                                                               (x.shape.rank() - k));
  std::vector<std::vector<int64_t>> source;
  for (int m = 1; m <= k; ++m) source.push_back(ops::BroadcastSource(in[m]->shape.dims(), p_dims));
  const std::vector<int64_t> strides = x.shape.Strides();
  int64_t rest = 1;
  for (int d = k; d < x.shape.rank(); ++d) rest *= x.shape.dim(d);
  const int64_t positions = out[0].size() / std::max<int64_t>(rest, 1);
  for (int64_t p = 0; p < positions; ++p) {
    int64_t base = 0;
    for (int m = 0; m < k; ++m) {
      double id = (*in[m + 1])[source[m][p]];
      const int64_t size = x.shape.dim(m);
      if (id < 0) id += static_cast<double>(size);
      if (!(id >= 0 && id < static_cast<double>(size)) || id != std::floor(id)) {
        return absl::InvalidArgumentError(absl::StrCat("index ", (*in[m + 1])[source[m][p]],
                                                       " is out of range for dim ", m,
                                                       " of size ", size));
      }
      base += static_cast<int64_t>(id) * strides[m];
    }
    for (int64_t r = 0; r < rest; ++r) out[0][p * rest + r] = x[base + r];
  }
  return absl::OkStatus();
}

double FlopsNone(absl::Span<const TensorType>, absl::Span<const TensorType>, const AttrMap&) {
  return 0;
}

double FlopsCumsum(absl::Span<const TensorType>, absl::Span<const TensorType> out,
                   const AttrMap&) {
  return FlopsPerOutputElement(out, 1);
}

}  // namespace

void RegisterIndexOps(SchemaTable& table) {
  table.Register(OpSchema{OpKind::kArange, InferArange, SignatureArange, KernelArange, FlopsNone,
                          nullptr,
                          "arange() {start, step, size, dtype=\"i64\"} -> [size], element i is "
                          "start + i * step",
                          ShardAttrsArange});
  table.Register(OpSchema{OpKind::kCumsum, InferCumsum, SignatureCumsum, KernelCumsum,
                          FlopsCumsum, nullptr, "cumsum(x) {dim} -> running sums along dim",
                          nullptr})
      .Linear({{0}});
  table.Register(OpSchema{OpKind::kIndex, InferIndex, SignatureIndex, KernelIndex, FlopsNone,
                          nullptr,
                          "index(x, i0, ..., ik-1) -> x[i0, ..., ik-1, ...]: index tensors "
                          "(broadcast together) address x's first k dims; negative ids count "
                          "from the end",
                          nullptr})
      .Linear({{0}});
}

}  // namespace loom::ir
