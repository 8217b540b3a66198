#ifndef LOOM_VERIFY_SYM_FORMULAS_H_
#define LOOM_VERIFY_SYM_FORMULAS_H_

// The formulas shared by the symbolic kernels of the reduce, loss, attention, MoE,
// norm, pointwise and optimizer families (verify/sym_ops_<family>.cc): the
// uninterpreted functions (argmax, top-k, cos, ...) and their numeric meaning, the
// transcendental functions, the softmax and log-sum-exp formulas of the reference
// kernels, row access, lookups by integer-valued terms, and the registration of a
// kernel under its op.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "smt/term.h"
#include "verify/sym_ops.h"

namespace loom::verify::internal {

// Uninterpreted functions whose numeric meaning DefineSymbolicFunctions registers.
// argmax(x_0, ..., x_{n-1}): the index of the first largest argument.
inline constexpr absl::string_view kArgMaxFn = "argmax";
// topk_index(j, s_0, ..., s_{n-1}): the index at position j when the indices are
// sorted by descending s, ties keeping the lower index first (a stable sort).
inline constexpr absl::string_view kTopKIndexFn = "topk_index";
// The pointwise family's functions: cos and sin; lt(a, b) and le(a, b), 1 when
// a < b (a <= b) else 0; step(x), 1 when x > 0 else 0; trunc(x), x rounded toward 0.
inline constexpr absl::string_view kCosFn = "cos";
inline constexpr absl::string_view kSinFn = "sin";
inline constexpr absl::string_view kLessFn = "lt";
inline constexpr absl::string_view kLessEqualFn = "le";
inline constexpr absl::string_view kStepFn = "step";
inline constexpr absl::string_view kTruncFn = "trunc";

// `status` with its message prefixed by "op '<kind>': ".
absl::Status WithOpName(ir::OpKind kind, const absl::Status& status);

// Wraps a kernel so that its errors name the op.
template <ir::OpKind kKind, SymKernelFn kFn>
absl::StatusOr<std::vector<SymTensor>> NamedKernel(smt::Terms& terms,
                                                   absl::Span<const SymTensor* const> in,
                                                   const ir::AttrMap& attrs,
                                                   absl::Span<const ir::TensorType> out_types) {
  absl::StatusOr<std::vector<SymTensor>> out = kFn(terms, in, attrs, out_types);
  if (!out.ok()) return WithOpName(kKind, out.status());
  return out;
}

// The registry entry of `kFn` for `kKind`, its errors naming the op.
template <ir::OpKind kKind, SymKernelFn kFn>
SymKernel MakeSymKernel(int version = 1) {
  return SymKernel{kKind, &NamedKernel<kKind, kFn>, version};
}

// A tensor of `type` holding zeros.
SymTensor ZerosLike(smt::Terms& terms, const ir::TensorType& type);
// Zero tensors for every output type.
std::vector<SymTensor> ZeroOutputs(smt::Terms& terms, absl::Span<const ir::TensorType> types);

// Size of the last dim (1 for a scalar) and the number of rows of that length.
int64_t LastDim(const ir::Shape& shape);
int64_t NumRows(const ir::Shape& shape);

// Terms [offset, offset + n) of `t`.
std::vector<smt::TermId> Slice(const SymTensor& t, int64_t offset, int64_t n);

// Applications of the transcendental functions of the reference kernels.
smt::TermId Exp(smt::Terms& terms, smt::TermId x);
smt::TermId Log(smt::Terms& terms, smt::TermId x);
smt::TermId Sqrt(smt::Terms& terms, smt::TermId x);

// min(a, b) written as -max(-a, -b).
smt::TermId Min(smt::Terms& terms, smt::TermId a, smt::TermId b);

// Mean of `row` (sum times 1/n); n > 0.
smt::TermId Mean(smt::Terms& terms, absl::Span<const smt::TermId> row);

// max(row) + log(sum_j exp(row_j - max(row))), as ir/ops/reduce_util.cc; n > 0.
smt::TermId LogSumExp(smt::Terms& terms, absl::Span<const smt::TermId> row);
// exp(row_j - max(row)) / sum_l exp(row_l - max(row)); n > 0.
std::vector<smt::TermId> Softmax(smt::Terms& terms, absl::Span<const smt::TermId> row);

// Partial softmaxes of one row merged (the online-softmax identity, the meaning of
// attention_merge and of a softmax split over its axis): with weights w_i =
// exp(lse_i), the merged log-sum-exp is log(sum_i w_i) and each merged value
// element (sum_i value_i w_i) / sum_i w_i. Written without the largest lse the
// reference kernel shifts by: equal over the reals, and it keeps exp(log(x)) = x
// and x / x = 1 within reach of the canonical terms (smt/term.h).
smt::TermId MergedLogSumExp(smt::Terms& terms, absl::Span<const smt::TermId> lses);
smt::TermId MergedValue(smt::Terms& terms, absl::Span<const smt::TermId> values,
                        absl::Span<const smt::TermId> lses);

// The entry of `values` that the integer-valued `index` selects, with entry v at
// index v + offset: sum_v Indicator(index, v + offset) * values[v] (0 when `index`
// names no entry).
smt::TermId Select(smt::Terms& terms, smt::TermId index, absl::Span<const smt::TermId> values,
                   int64_t offset = 0);

// An integer attribute that must be 0 or 1.
absl::StatusOr<bool> FlagAttr(const ir::AttrMap& attrs, absl::string_view name,
                              int64_t default_value);

// Numeric meanings of kArgMaxFn and kTopKIndexFn.
double ArgMaxValue(absl::Span<const double> args);
double TopKIndexValue(absl::Span<const double> args);
// Numeric meanings of the pointwise family's functions.
double CosValue(absl::Span<const double> args);
double SinValue(absl::Span<const double> args);
double LessValue(absl::Span<const double> args);
double LessEqualValue(absl::Span<const double> args);
double StepValue(absl::Span<const double> args);
double TruncValue(absl::Span<const double> args);

}  // namespace loom::verify::internal

#endif  // LOOM_VERIFY_SYM_FORMULAS_H_
