#ifndef LOOM_IR_OPS_OP_UTIL_H_
#define LOOM_IR_OPS_OP_UTIL_H_

// Small helpers shared by the op schemas in ir/ops/.

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "ir/op_schema.h"

namespace loom::ir::ops {

// "input 1 has 3 dims, expected 2" style errors.
absl::Status ExpectRank(absl::Span<const TensorType> in, int i, int rank);
absl::Status ExpectMinRank(absl::Span<const TensorType> in, int i, int rank);
absl::Status ExpectFloat(absl::Span<const TensorType> in, int i);
absl::Status ExpectInteger(absl::Span<const TensorType> in, int i);
// Same dims and dtype for inputs i and j.
absl::Status ExpectSameType(absl::Span<const TensorType> in, int i, int j);
// Input i is a scalar (rank 0).
absl::Status ExpectScalar(absl::Span<const TensorType> in, int i);
// Input i has exactly `dims`.
absl::Status ExpectDims(absl::Span<const TensorType> in, int i,
                        const std::vector<int64_t>& dims);

// Labels "d0", "d1", ... for a rank-`rank` tensor.
std::vector<std::string> DimLabels(int rank, absl::string_view prefix = "d");
// Every input and output carries the same labels, all spatial.
DimSignature ElementwiseSignature(int rank, int num_inputs, int num_outputs = 1);
// Marks every label of `sig` not yet in `kinds` as spatial.
void DefaultSpatial(DimSignature& sig);

// Broadcasting (NumPy's rule, dims aligned at the last one): the dims of the
// result of the inputs, where each input dim equals the result's or is 1.
// InvalidArgument naming the first input and dim that does not broadcast.
absl::StatusOr<std::vector<int64_t>> BroadcastDims(absl::Span<const TensorType> in);
// Signature of an elementwise op whose inputs broadcast to `out_dims`: output dim
// j is labelled "d<j>" (spatial); an input dim carries that label when its size is
// the output's, and a label of its own, "b<i>_<j>" (spatial, of extent 1: never
// split), when input i broadcasts it from size 1. Every output has `out_dims`.
DimSignature BroadcastSignature(absl::Span<const TensorType> in,
                                const std::vector<int64_t>& out_dims, int num_outputs = 1);
// For each element of a result of dims `out_dims`, in row-major order, the flat
// index of the element of an input of dims `in_dims` that broadcasts to it.
std::vector<int64_t> BroadcastSource(const std::vector<int64_t>& in_dims,
                                     const std::vector<int64_t>& out_dims);

// FLOPs = elements of output 0 times `per_element`.
double ElementCount(const TensorType& t);
double FlopsPerOutputElement(absl::Span<const TensorType> out, double per_element);

// Result type with the dtype of input `i` and the given dims.
TensorType Like(const TensorType& t, std::vector<int64_t> dims);

// For resize rules (OpSchema::resize_attrs): the new size of `label`, an
// internal error when the caller gave none.
absl::StatusOr<int64_t> LabelSize(const std::map<std::string, int64_t>& label_sizes,
                                  const std::string& label);
// The resize rule of ops whose `vocab` attribute sizes their output's vocabulary
// label "v" (pick_grad, embedding_grad).
absl::StatusOr<AttrMap> ResizeVocab(const AttrMap& attrs, const DimSignature& sig,
                                    absl::Span<const TensorType> old_out,
                                    absl::Span<const TensorType> new_in,
                                    const std::map<std::string, int64_t>& label_sizes);

}  // namespace loom::ir::ops

#endif  // LOOM_IR_OPS_OP_UTIL_H_
