// Symbolic kernels of the shape family (reference kernels: ir/ops/shape.cc).
//
// Pure data movement: every output element is an input element (or zero for
// pad's border), chosen by the same index arithmetic as the reference kernels.
// Shape inference (run by EvalSymbolic before any kernel) has already checked
// the attributes; the kernels read them again only to know the dim and ranges.

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "verify/sym_ops_internal.h"
#include "verify/sym_elements.h"

namespace loom::verify::internal {
namespace {

// The `dim` attribute normalised against `rank`.
absl::StatusOr<int> GetDim(absl::string_view op, const ir::AttrMap& attrs, int rank) {
  absl::StatusOr<int64_t> dim = attrs.GetInt("dim");
  if (!dim.ok()) return OpError(op, dim.status());
  absl::StatusOr<int> d = ir::NormalizeDim(*dim, rank);
  if (!d.ok()) return OpError(op, d.status());
  return *d;
}

// An integer attribute, errors naming the op.
absl::StatusOr<int64_t> GetInt(absl::string_view op, const ir::AttrMap& attrs,
                               absl::string_view name) {
  absl::StatusOr<int64_t> v = attrs.GetInt(name);
  if (!v.ok()) return OpError(op, v.status());
  return *v;
}

// The data is unchanged; only the dims are.
Outputs Reshape(Terms&, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  SymTensor y;
  y.shape = out_types[0].shape;
  y.dtype = out_types[0].dtype;
  y.data = in[0]->data;
  return std::vector<SymTensor>{std::move(y)};
}

// Output dim i is input dim perm[i].
Outputs Transpose(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int rank = x.shape.rank();
  absl::StatusOr<std::vector<int64_t>> raw = attrs.GetInts("perm");
  if (!raw.ok()) return OpError("transpose", raw.status());
  if (static_cast<int>(raw->size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat("op 'transpose': attribute 'perm' [",
                                                   absl::StrJoin(*raw, ","), "] has ", raw->size(),
                                                   " entries, expected ", rank));
  }
  std::vector<int> perm;
  for (int64_t p : *raw) {
    absl::StatusOr<int> d = ir::NormalizeDim(p, rank);
    if (!d.ok()) return OpError("transpose", d.status());
    perm.push_back(*d);
  }
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const std::vector<int64_t> in_strides = x.shape.Strides();
  std::vector<int64_t> index(rank, 0);  // multi-index into the output
  for (size_t o = 0; o < y.data.size(); ++o) {
    int64_t src = 0;
    for (int i = 0; i < rank; ++i) src += index[i] * in_strides[perm[i]];
    y.data[o] = x.data[src];
    for (int i = rank - 1; i >= 0; --i) {
      if (++index[i] < y.shape.dim(i)) break;
      index[i] = 0;
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// Inputs laid one after the other along `dim`.
Outputs Concat(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim("concat", attrs, in[0]->shape.rank()));
  SymTensor y = FilledLike(out_types[0], t.Zero());
  int64_t offset = 0;
  for (const SymTensor* x : in) {
    CopyAlongDim(*x, 0, y, offset, x->shape.dim(dim), dim);
    offset += x->shape.dim(dim);
  }
  return std::vector<SymTensor>{std::move(y)};
}

// Positions [begin, end) along `dim`.
Outputs Slice(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim("slice", attrs, x.shape.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t begin, GetInt("slice", attrs, "begin"));
  LOOM_ASSIGN_OR_RETURN(int64_t end, GetInt("slice", attrs, "end"));
  if (begin < 0 || begin >= end || end > x.shape.dim(dim)) {
    return absl::InvalidArgumentError(absl::StrCat("op 'slice': [", begin, ", ", end,
                                                   ") is not a non-empty range of dim ", dim,
                                                   " (size ", x.shape.dim(dim), ")"));
  }
  SymTensor y = FilledLike(out_types[0], t.Zero());
  CopyAlongDim(x, begin, y, 0, end - begin, dim);
  return std::vector<SymTensor>{std::move(y)};
}

// Consecutive pieces along `dim`, sized as the outputs.
Outputs Split(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim("split", attrs, x.shape.rank()));
  std::vector<SymTensor> out = FilledOutputs(out_types, t.Zero());
  int64_t offset = 0;
  for (SymTensor& piece : out) {
    CopyAlongDim(x, offset, piece, 0, piece.shape.dim(dim), dim);
    offset += piece.shape.dim(dim);
  }
  return out;
}

// Zeros before and after the input along `dim`.
Outputs Pad(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim("pad", attrs, x.shape.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t before, GetInt("pad", attrs, "before"));
  if (before < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("op 'pad': attribute 'before' is ", before, ", expected at least 0"));
  }
  SymTensor y = FilledLike(out_types[0], t.Zero());
  CopyAlongDim(x, 0, y, before, x.shape.dim(dim), dim);
  return std::vector<SymTensor>{std::move(y)};
}

// The size-1 dim `dim` repeated to the output's extent.
Outputs Expand(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  const SymTensor& x = *in[0];
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim("expand", attrs, x.shape.rank()));
  SymTensor y = FilledLike(out_types[0], t.Zero());
  for (int64_t c = 0; c < y.shape.dim(dim); ++c) CopyAlongDim(x, 0, y, c, 1, dim);
  return std::vector<SymTensor>{std::move(y)};
}

}  // namespace

std::vector<SymKernel> ShapeSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kConcat, Concat},       {OpKind::kExpand, Expand}, {OpKind::kPad, Pad},
      {OpKind::kReshape, Reshape},     {OpKind::kSlice, Slice},   {OpKind::kSplit, Split},
      {OpKind::kTranspose, Transpose},
  };
}

}  // namespace loom::verify::internal
