// Shape ops: reshape, transpose, concat, slice, split, pad, expand.
// Pure data movement (0 FLOPs); every dtype is accepted and kept. A dim whose extent
// changes carries its own fixed label on each side; every other dim is spatial.
// Reshape labels its dim groups instead (see SignatureReshape).

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_join.h"
#include "ir/ops/op_util.h"
#include "ir/ops/reshape.h"
#include "ir/ops/ops.h"
#include "ir/status_macros.h"

namespace loom::ir {
namespace {

using ops::DefaultSpatial;
using ops::DimLabels;
using ops::Like;

// ---- attributes ----------------------------------------------------------------

// The `dim` attribute normalised against `rank` (negative dims count from the end).
absl::StatusOr<int> GetDim(const AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  return NormalizeDim(dim, rank);
}

// The `perm` attribute normalised against `rank`; it must be a permutation.
absl::StatusOr<std::vector<int>> GetPerm(const AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> raw, attrs.GetInts("perm"));
  if (static_cast<int>(raw.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'perm' has ", raw.size(), " entries, expected ", rank, " (the input rank)"));
  }
  std::vector<int> perm;
  std::vector<bool> seen(rank, false);
  for (int64_t p : raw) {
    LOOM_ASSIGN_OR_RETURN(int d, NormalizeDim(p, rank));
    if (seen[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'perm' [", absl::StrJoin(raw, ","), "] names dim ", d, " twice"));
    }
    seen[d] = true;
    perm.push_back(d);
  }
  return perm;
}

// Output dims of reshape: the `shape` attribute with its -1 (if any) inferred.
absl::StatusOr<std::vector<int64_t>> ReshapeDims(const Shape& in, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, attrs.GetInts("shape"));
  int inferred = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    if (dims[i] == -1 && inferred < 0) {
      inferred = i;
    } else if (dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'shape' [", absl::StrJoin(dims, ","), "] has dim ", dims[i],
                       " at position ", i, "; only one -1 (inferred) is allowed"));
    } else {
      known *= dims[i];
    }
  }
  int64_t total = in.num_elements();
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reshape ", in.ToString(), " into [", absl::StrJoin(dims, ","), "]"));
    }
    dims[inferred] = total / known;
  } else if (known != total) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", in.ToString(), " (", total,
                                                   " elements) into [", absl::StrJoin(dims, ","),
                                                   "] (", known, " elements)"));
  }
  return dims;
}

struct Range {
  int dim;
  int64_t begin;
  int64_t end;
};

// slice's {dim, begin, end}, checked against the input.
absl::StatusOr<Range> GetSliceRange(const Shape& in, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("begin"));
  LOOM_ASSIGN_OR_RETURN(int64_t end, attrs.GetInt("end"));
  if (begin < 0 || begin >= end || end > in.dim(dim)) {
    return absl::InvalidArgumentError(absl::StrCat("slice [", begin, ", ", end,
                                                   ") is not a non-empty range of dim ", dim,
                                                   " (size ", in.dim(dim), ")"));
  }
  return Range{dim, begin, end};
}

// pad's {dim, before, after}.
absl::StatusOr<Range> GetPadding(const Shape& in, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t before, attrs.GetInt("before"));
  LOOM_ASSIGN_OR_RETURN(int64_t after, attrs.GetInt("after"));
  if (before < 0 || after < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("padding before=", before, " after=", after, " is negative"));
  }
  return Range{dim, before, after};
}

// split's `sizes`, checked to be positive and to sum to the split dim.
absl::StatusOr<std::vector<int64_t>> GetSplitSizes(const Shape& in, int dim, const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, attrs.GetInts("sizes"));
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attribute 'sizes' [", absl::StrJoin(sizes, ","), "] has a non-positive size"));
    }
    sum += s;
  }
  if (sizes.empty() || sum != in.dim(dim)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'sizes' [", absl::StrJoin(sizes, ","),
                                                   "] sums to ", sum, ", expected ", in.dim(dim),
                                                   " (dim ", dim, ")"));
  }
  return sizes;
}

// ---- shape rules ---------------------------------------------------------------

absl::StatusOr<std::vector<TensorType>> InferReshape(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReshapeDims(in[0].shape, attrs));
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

absl::StatusOr<std::vector<TensorType>> InferTranspose(absl::Span<const TensorType> in,
                                                       const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int> perm, GetPerm(attrs, in[0].shape.rank()));
  std::vector<int64_t> dims;
  for (int p : perm) dims.push_back(in[0].shape.dim(p));
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

absl::StatusOr<std::vector<TensorType>> InferConcat(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0].shape.rank()));
  std::vector<int64_t> dims = in[0].shape.dims();
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorType& t = in[i];
    bool same = t.dtype == in[0].dtype && t.shape.rank() == in[0].shape.rank();
    for (int d = 0; same && d < t.shape.rank(); ++d) {
      same = d == dim || t.shape.dim(d) == dims[d];
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", t.ToString(),
                                                     ", expected ", in[0].ToString(),
                                                     " like input 0 except along dim ", dim));
    }
    dims[dim] += t.shape.dim(dim);
  }
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

absl::StatusOr<std::vector<TensorType>> InferSlice(absl::Span<const TensorType> in,
                                                   const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(Range r, GetSliceRange(in[0].shape, attrs));
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[r.dim] = r.end - r.begin;
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

absl::StatusOr<std::vector<TensorType>> InferSplit(absl::Span<const TensorType> in,
                                                   const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0].shape.rank()));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, GetSplitSizes(in[0].shape, dim, attrs));
  std::vector<TensorType> out;
  for (int64_t s : sizes) {
    std::vector<int64_t> dims = in[0].shape.dims();
    dims[dim] = s;
    out.push_back(Like(in[0], std::move(dims)));
  }
  return out;
}

absl::StatusOr<std::vector<TensorType>> InferPad(absl::Span<const TensorType> in,
                                                 const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(Range r, GetPadding(in[0].shape, attrs));
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[r.dim] += r.begin + r.end;
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

absl::StatusOr<std::vector<TensorType>> InferExpand(absl::Span<const TensorType> in,
                                                    const AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0].shape.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t size, attrs.GetInt("size"));
  if (in[0].shape.dim(dim) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 0 has size ", in[0].shape.dim(dim), " at dim ", dim, ", expected 1"));
  }
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'size' is ", size, ", expected at least 1"));
  }
  std::vector<int64_t> dims = in[0].shape.dims();
  dims[dim] = size;
  return std::vector<TensorType>{Like(in[0], std::move(dims))};
}

// ---- signatures ----------------------------------------------------------------

// Dims "d0 d1 ..." are spatial and shared, except dim `dim`, which is labelled
// `in_label` on every input and `out_labels[i]` on output i, all fixed.
DimSignature OneDimChanges(int rank, int dim, const std::vector<std::string>& in_labels,
                           const std::vector<std::string>& out_labels) {
  DimSignature sig;
  std::vector<std::string> labels = DimLabels(rank);
  for (const auto& l : in_labels) {
    labels[dim] = l;
    sig.inputs.push_back(labels);
    sig.kinds[l] = DimKind::kFixed;
  }
  for (const auto& l : out_labels) {
    labels[dim] = l;
    sig.outputs.push_back(labels);
    sig.kinds[l] = DimKind::kFixed;
  }
  DefaultSpatial(sig);
  return sig;
}

// Reshape groups: input and output dims walked together and cut where the running
// products agree (the standard reshape grouping). A size-1 dim facing a size-1 dim
// pairs with it; any other size-1 dim joins its neighbour group. Each group carries
// one shared spatial label on the leading dim of each side ("d<i>", i the input dim):
// splitting it n ways is exact when n divides both leading sizes, since chunk k of a
// merged dim (h d) is rows [k h/n, (k+1) h/n) of h. Every other dim of a group (a
// non-leading dim of a split or merge, a size-1 dim joining a group) carries its own
// fixed label, "x<i>" on the input and "y<j>" on the output.
absl::StatusOr<DimSignature> SignatureReshape(absl::Span<const TensorType> in,
                                              const AttrMap& attrs) {
  const Shape& a = in[0].shape;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> b, ReshapeDims(a, attrs));
  const int n = a.rank();
  const int m = static_cast<int>(b.size());
  std::vector<std::string> in_labels = DimLabels(n, "x");
  std::vector<std::string> out_labels = DimLabels(m, "y");
  DimSignature sig;
  auto share = [&](int i, int j) {
    in_labels[i] = out_labels[j] = absl::StrCat("d", i);
    sig.kinds[in_labels[i]] = DimKind::kSpatial;
  };
  // An empty tensor has nothing to split: every label stays fixed.
  if (a.num_elements() > 0) {
    int i = 0;
    int j = 0;
    while (i < n || j < m) {
      const bool a_one = i < n && a.dim(i) == 1;
      const bool b_one = j < m && b[j] == 1;
      if (a_one && b_one) {
        share(i++, j++);
      } else if (a_one) {
        ++i;  // joins a neighbour group with its own fixed label
      } else if (b_one) {
        ++j;
      } else {
        // Both sides have a dim > 1 left (the remaining products are equal).
        LOOM_RET_CHECK(i < n && j < m) << "reshape " << a.ToString() << " grouping";
        share(i, j);
        int64_t p = a.dim(i++);
        int64_t q = b[j++];
        while (p != q) {
          if (p < q) {
            LOOM_RET_CHECK(i < n) << "reshape " << a.ToString() << " grouping";
            p *= a.dim(i++);
          } else {
            LOOM_RET_CHECK(j < m) << "reshape " << a.ToString() << " grouping";
            q *= b[j++];
          }
        }
      }
    }
  }
  for (const std::string& l : in_labels) sig.kinds.emplace(l, DimKind::kFixed);
  for (const std::string& l : out_labels) sig.kinds.emplace(l, DimKind::kFixed);
  sig.inputs = {in_labels};
  sig.outputs = {out_labels};
  return sig;
}

absl::StatusOr<DimSignature> SignatureTranspose(absl::Span<const TensorType> in,
                                                const AttrMap& attrs) {
  int rank = in[0].shape.rank();
  LOOM_ASSIGN_OR_RETURN(std::vector<int> perm, GetPerm(attrs, rank));
  DimSignature sig;
  std::vector<std::string> labels = DimLabels(rank);
  std::vector<std::string> out;
  for (int p : perm) out.push_back(labels[p]);
  sig.inputs = {labels};
  sig.outputs = {out};
  DefaultSpatial(sig);
  return sig;
}

absl::StatusOr<DimSignature> SignatureConcat(absl::Span<const TensorType> in,
                                             const AttrMap& attrs) {
  int rank = in[0].shape.rank();
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, rank));
  return OneDimChanges(rank, dim, DimLabels(static_cast<int>(in.size()), "c"), {"c"});
}

absl::StatusOr<DimSignature> SignatureSplit(absl::Span<const TensorType> in, const AttrMap& attrs) {
  int rank = in[0].shape.rank();
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, rank));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, GetSplitSizes(in[0].shape, dim, attrs));
  return OneDimChanges(rank, dim, {"c"}, DimLabels(static_cast<int>(sizes.size()), "c"));
}

// slice, pad: the named dim changes extent (fixed), the others are spatial.
absl::StatusOr<DimSignature> SignatureOneDim(absl::Span<const TensorType> in,
                                             const AttrMap& attrs) {
  int rank = in[0].shape.rank();
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, rank));
  return OneDimChanges(rank, dim, {"x"}, {"y"});
}

// expand: the size-1 input dim `x` is fixed; the expanded output dim `y` is a spatial
// label of the output alone, so a piece along it is a narrower expansion of the same
// input.
absl::StatusOr<DimSignature> SignatureExpand(absl::Span<const TensorType> in,
                                             const AttrMap& attrs) {
  int rank = in[0].shape.rank();
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, rank));
  DimSignature sig = OneDimChanges(rank, dim, {"x"}, {"y"});
  sig.kinds["y"] = DimKind::kSpatial;
  return sig;
}

// ---- pieces ---------------------------------------------------------------------

// A piece of a reshape produces its output box: `shape` becomes the box's dims.
absl::StatusOr<AttrMap> ShardAttrsReshape(const AttrMap& attrs, absl::Span<const TensorType>,
                                          absl::Span<const Box>, absl::Span<const TensorType> out,
                                          absl::Span<const Box> out_boxes) {
  if (out_boxes.size() != 1 || static_cast<int>(out_boxes[0].size()) != out[0].shape.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshape piece needs one output box of ", out[0].shape.rank(), " dims"));
  }
  AttrMap piece = attrs;
  piece.Set("shape", BoxDims(out_boxes[0]));
  return piece;
}

// A piece of an expand produces its output box: `size` becomes the box's extent
// along the expanded dim.
absl::StatusOr<AttrMap> ShardAttrsExpand(const AttrMap& attrs, absl::Span<const TensorType>,
                                         absl::Span<const Box>, absl::Span<const TensorType> out,
                                         absl::Span<const Box> out_boxes) {
  const int rank = out[0].shape.rank();
  if (out_boxes.size() != 1 || static_cast<int>(out_boxes[0].size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("expand piece needs one output box of ", rank, " dims"));
  }
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, rank));
  AttrMap piece = attrs;
  piece.Set("size", out_boxes[0][dim].end - out_boxes[0][dim].begin);
  return piece;
}

double NoFlops(absl::Span<const TensorType>, absl::Span<const TensorType>, const AttrMap&) {
  return 0.0;
}

// ---- kernels -------------------------------------------------------------------

// Copies positions [src_begin, src_begin + count) along `dim` of `src` to positions
// starting at `dst_begin` of `dst`; the two agree on every other dim.
void CopyAlongDim(const HostTensor& src, int64_t src_begin, HostTensor& dst, int64_t dst_begin,
                  int64_t count, int dim) {
  int64_t outer = 1;
  int64_t inner = 1;
  for (int i = 0; i < dim; ++i) outer *= src.shape.dim(i);
  for (int i = dim + 1; i < src.shape.rank(); ++i) inner *= src.shape.dim(i);
  const int64_t src_n = src.shape.dim(dim);
  const int64_t dst_n = dst.shape.dim(dim);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < count; ++c) {
      for (int64_t j = 0; j < inner; ++j) {
        dst[(o * dst_n + dst_begin + c) * inner + j] = src[(o * src_n + src_begin + c) * inner + j];
      }
    }
  }
}

absl::Status KernelReshape(absl::Span<const HostTensor* const> in, const AttrMap&,
                           absl::Span<HostTensor> out) {
  out[0].data = in[0]->data;
  return absl::OkStatus();
}

absl::Status KernelTranspose(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                             absl::Span<HostTensor> out) {
  const HostTensor& x = *in[0];
  const int rank = x.shape.rank();
  LOOM_ASSIGN_OR_RETURN(std::vector<int> perm, GetPerm(attrs, rank));
  std::vector<int64_t> in_strides = x.shape.Strides();
  std::vector<int64_t> index(rank, 0);  // multi-index into the output
  for (int64_t o = 0; o < out[0].size(); ++o) {
    int64_t src = 0;
    for (int i = 0; i < rank; ++i) src += index[i] * in_strides[perm[i]];
    out[0][o] = x[src];
    for (int i = rank - 1; i >= 0; --i) {
      if (++index[i] < out[0].shape.dim(i)) break;
      index[i] = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status KernelConcat(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                          absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0]->shape.rank()));
  int64_t offset = 0;
  for (const HostTensor* x : in) {
    CopyAlongDim(*x, 0, out[0], offset, x->shape.dim(dim), dim);
    offset += x->shape.dim(dim);
  }
  return absl::OkStatus();
}

absl::Status KernelSlice(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                         absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(Range r, GetSliceRange(in[0]->shape, attrs));
  CopyAlongDim(*in[0], r.begin, out[0], 0, r.end - r.begin, r.dim);
  return absl::OkStatus();
}

absl::Status KernelSplit(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                         absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0]->shape.rank()));
  int64_t offset = 0;
  for (HostTensor& piece : out) {
    CopyAlongDim(*in[0], offset, piece, 0, piece.shape.dim(dim), dim);
    offset += piece.shape.dim(dim);
  }
  return absl::OkStatus();
}

absl::Status KernelPad(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                       absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(Range r, GetPadding(in[0]->shape, attrs));
  CopyAlongDim(*in[0], 0, out[0], r.begin, in[0]->shape.dim(r.dim), r.dim);
  return absl::OkStatus();
}

absl::Status KernelExpand(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                          absl::Span<HostTensor> out) {
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(attrs, in[0]->shape.rank()));
  for (int64_t c = 0; c < out[0].shape.dim(dim); ++c) CopyAlongDim(*in[0], 0, out[0], c, 1, dim);
  return absl::OkStatus();
}

// ---- gradient rules ------------------------------------------------------------

using Grads = absl::StatusOr<std::vector<std::optional<TensorId>>>;

// Shape ops move integer data too; such inputs get no gradient.
bool IsIntegerInput(const GradBuilder& b, int i) { return !IsFloat(b.input_type(i).dtype); }

Grads GradReshape(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      TensorId dx,
      b.Emit1(OpKind::kReshape, {dy}, {{"shape", b.input_type(0).shape.dims()}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradTranspose(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  LOOM_ASSIGN_OR_RETURN(std::vector<int> perm, GetPerm(b.op().attrs, b.input_type(0).shape.rank()));
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kTranspose, {dy}, {{"perm", inverse}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradConcat(GradBuilder& b) {
  const int n = static_cast<int>(b.op().inputs.size());
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>(n, std::nullopt);
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(b.op().attrs, b.input_type(0).shape.rank()));
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) sizes.push_back(b.input_type(i).shape.dim(dim));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      std::vector<TensorId> pieces,
      b.Emit(OpKind::kSplit, {dy}, {{"dim", int64_t{dim}}, {"sizes", sizes}}, b.GradName(0)));
  LOOM_RET_CHECK(static_cast<int>(pieces.size()) == n) << "split gave " << pieces.size();
  return std::vector<std::optional<TensorId>>(pieces.begin(), pieces.end());
}

Grads GradSlice(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  const Shape a = b.input_type(0).shape;
  LOOM_ASSIGN_OR_RETURN(Range r, GetSliceRange(a, b.op().attrs));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  AttrMap attrs{{"dim", int64_t{r.dim}}, {"before", r.begin}, {"after", a.dim(r.dim) - r.end}};
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kPad, {dy}, attrs, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradSplit(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(b.op().attrs, b.input_type(0).shape.rank()));
  std::vector<TensorId> pieces;
  for (int i = 0; i < static_cast<int>(b.op().outputs.size()); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId d, b.GradOutputOrZeros(i));
    pieces.push_back(d);
  }
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kConcat, pieces, {{"dim", int64_t{dim}}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

Grads GradPad(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  const Shape a = b.input_type(0).shape;
  LOOM_ASSIGN_OR_RETURN(Range r, GetPadding(a, b.op().attrs));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  AttrMap attrs{{"dim", int64_t{r.dim}}, {"begin", r.begin}, {"end", r.begin + a.dim(r.dim)}};
  LOOM_ASSIGN_OR_RETURN(TensorId dx, b.Emit1(OpKind::kSlice, {dy}, attrs, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// Every copy receives its own gradient: sum them over the expanded dim.
Grads GradExpand(GradBuilder& b) {
  if (IsIntegerInput(b, 0)) return std::vector<std::optional<TensorId>>{std::nullopt};
  const Shape a = b.input_type(0).shape;
  LOOM_ASSIGN_OR_RETURN(int dim, GetDim(b.op().attrs, a.rank()));
  LOOM_ASSIGN_OR_RETURN(TensorId dy, b.GradOutputOrZeros(0));
  LOOM_ASSIGN_OR_RETURN(
      TensorId summed,
      b.Emit1(OpKind::kSum, {dy}, {{"dims", std::vector<int64_t>{dim}}}, "expand_grad_sum"));
  LOOM_ASSIGN_OR_RETURN(TensorId dx,
                        b.Emit1(OpKind::kReshape, {summed}, {{"shape", a.dims()}}, b.GradName(0)));
  return std::vector<std::optional<TensorId>>{dx};
}

// The schema's resize rules (OpSchema::resize_attrs).
absl::StatusOr<AttrMap> ResizeExpand(const AttrMap& attrs, const DimSignature& sig,
                                     absl::Span<const TensorType> old_out,
                                     absl::Span<const TensorType>,
                                     const std::map<std::string, int64_t>& label_sizes) {
  LOOM_RET_CHECK(!old_out.empty() && !sig.outputs.empty()) << "expand without an output";
  LOOM_ASSIGN_OR_RETURN(int64_t raw, attrs.GetInt("dim"));
  LOOM_ASSIGN_OR_RETURN(int dim, NormalizeDim(raw, old_out[0].shape.rank()));
  LOOM_ASSIGN_OR_RETURN(int64_t size, ops::LabelSize(label_sizes, sig.outputs[0][dim]));
  AttrMap out = attrs;
  out.Set("size", size);
  return out;
}

absl::StatusOr<AttrMap> ResizeReshape(const AttrMap& attrs, const DimSignature& sig,
                                      absl::Span<const TensorType> old_out,
                                      absl::Span<const TensorType> new_in,
                                      const std::map<std::string, int64_t>& label_sizes) {
  LOOM_RET_CHECK(!old_out.empty() && !new_in.empty()) << "reshape without its tensors";
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                        ReshapeShape(sig, old_out[0].shape, new_in[0].shape, label_sizes));
  AttrMap out = attrs;
  out.Set("shape", dims);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ReshapeShape(
    const DimSignature& sig, const Shape& old_out, const Shape& new_in,
    const std::map<std::string, int64_t>& sizes) {
  std::vector<int64_t> dims = old_out.dims();
  for (size_t j = 0; j < dims.size(); ++j) {
    auto it = sizes.find(sig.outputs[0][j]);
    if (it != sizes.end()) dims[j] = it->second;
  }
  std::vector<bool> grouped(dims.size(), false);
  for (const ReshapeGroup& g : ReshapeGroups(sig)) {
    int64_t in = new_in.dim(g.in_lead);
    for (int i : g.in_rest) in *= new_in.dim(i);
    int64_t rest = 1;
    for (int j : g.out_rest) rest *= dims[j], grouped[j] = true;
    grouped[g.out_lead] = true;
    if (rest <= 0 || in % rest != 0) {
      return absl::InvalidArgumentError(absl::StrCat("reshape group ", g.label, ": ", in,
                                                     " elements do not fill ", rest, " per row"));
    }
    dims[g.out_lead] = in / rest;
  }
  for (size_t j = 0; j < dims.size(); ++j) {
    if (!grouped[j] && dims[j] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("reshape output dim ", j, " is in no group"));
    }
  }
  return dims;
}

std::vector<ReshapeGroup> ReshapeGroups(const DimSignature& sig) {
  std::vector<ReshapeGroup> groups;
  if (sig.inputs.size() != 1 || sig.outputs.size() != 1) return groups;
  const std::vector<std::string>& in = sig.inputs[0];
  const std::vector<std::string>& out = sig.outputs[0];
  const std::set<std::string> in_set(in.begin(), in.end());
  std::map<std::string, size_t> by_label;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::find(out.begin(), out.end(), in[i]) == out.end()) {
      if (!groups.empty()) groups.back().in_rest.push_back(static_cast<int>(i));
      continue;
    }
    ReshapeGroup g;
    g.label = in[i];
    g.in_lead = static_cast<int>(i);
    by_label[in[i]] = groups.size();
    groups.push_back(std::move(g));
  }
  ReshapeGroup* current = nullptr;
  for (size_t j = 0; j < out.size(); ++j) {
    auto it = by_label.find(out[j]);
    if (it != by_label.end()) {
      current = &groups[it->second];
      current->out_lead = static_cast<int>(j);
    } else if (current != nullptr && in_set.count(out[j]) == 0) {
      current->out_rest.push_back(static_cast<int>(j));
    }
  }
  return groups;
}

void RegisterShapeOps(SchemaTable& table) {
  auto reg = [&](OpKind kind, InferFn infer, SignatureFn sig, KernelFn kernel, GradFn grad,
                 const char* doc, ShardAttrsFn shard_attrs = nullptr) -> OpSchema& {
    return table.Register(OpSchema{kind, infer, sig, kernel, NoFlops, grad, doc, shard_attrs});
  };
  reg(OpKind::kConcat, InferConcat, SignatureConcat, KernelConcat, GradConcat,
      "concat(x0, x1, ...) {dim} -> inputs joined along dim (equal elsewhere)")
      .LinearInEveryInput();
  reg(OpKind::kExpand, InferExpand, SignatureExpand, KernelExpand, GradExpand,
      "expand(a) {dim, size} -> a repeated `size` times along dim, where a has size 1",
      ShardAttrsExpand)
      .Linear({{0}})
      .Resizes(ResizeExpand);
  reg(OpKind::kPad, InferPad, SignatureOneDim, KernelPad, GradPad,
      "pad(a) {dim, before, after} -> a with zeros added before and after along dim")
      .Linear({{0}})
      .Attr("before", AttrRole::kPosition)
      .Attr("after", AttrRole::kPosition);
  reg(OpKind::kReshape, InferReshape, SignatureReshape, KernelReshape, GradReshape,
      "reshape(a) {shape} -> a with new dims, same element count; one -1 is inferred",
      ShardAttrsReshape)
      .Linear({{0}})
      .Resizes(ResizeReshape);
  reg(OpKind::kSlice, InferSlice, SignatureOneDim, KernelSlice, GradSlice,
      "slice(a) {dim, begin, end} -> positions [begin, end) of a along dim")
      .Linear({{0}})
      .Attr("begin", AttrRole::kPosition)
      .Attr("end", AttrRole::kPosition);
  reg(OpKind::kSplit, InferSplit, SignatureSplit, KernelSplit, GradSplit,
      "split(a) {dim, sizes} -> one piece per size along dim, in order")
      .Linear({{0}})
      .Attr("sizes", AttrRole::kPositions);
  reg(OpKind::kTranspose, InferTranspose, SignatureTranspose, KernelTranspose, GradTranspose,
      "transpose(a) {perm} -> a with output dim i taken from input dim perm[i]")
      .Linear({{0}});
}

}  // namespace loom::ir
