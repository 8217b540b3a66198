#ifndef LOOM_IR_OPS_OP_UTIL_H_
#define LOOM_IR_OPS_OP_UTIL_H_

// Small helpers shared by the op schemas in ir/ops/.

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

// FLOPs = elements of output 0 times `per_element`.
double ElementCount(const TensorType& t);
double FlopsPerOutputElement(absl::Span<const TensorType> out, double per_element);

// Result type with the dtype of input `i` and the given dims.
TensorType Like(const TensorType& t, std::vector<int64_t> dims);

}  // namespace loom::ir::ops

#endif  // LOOM_IR_OPS_OP_UTIL_H_
