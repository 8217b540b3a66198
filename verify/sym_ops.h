#ifndef LOOM_VERIFY_SYM_OPS_H_
#define LOOM_VERIFY_SYM_OPS_H_

// Symbolic semantics of every op kind: the op's reference kernel (ir/ops) written
// over terms (smt/term.h) instead of doubles, element by element. This is what the
// verifier proves with; a kind without symbolic semantics can never be proved.
//
// Faithfulness rules: each symbolic kernel computes exactly what the reference
// kernel computes (same formula, same reduction order is not required: sums are
// normalised), with transcendental functions as uninterpreted function symbols
// named after the real function ("exp", "log", "rsqrt", "sqrt", "tanh", "erf",
// "sigmoid") so that Terms::Evaluate gives them their real meaning. No op is
// replaced by a simpler stand-in. Integer-valued inputs (token ids, targets,
// expert indices) are terms too: a lookup of row `ids[t]` is the sum over rows v of
// Indicator(ids[t], v) * table[v]. Data-dependent choices that are not arithmetic
// (top-k selection, arg-max tie breaking) are uninterpreted functions of every
// value they depend on.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "smt/term.h"

namespace loom::verify {

// A dense row-major tensor of terms.
struct SymTensor {
  ir::Shape shape;
  ir::DType dtype = ir::DType::kF32;
  std::vector<smt::TermId> data;  // shape.num_elements() entries
};

// Outputs of `kind` on `in` with `attrs`, shaped as ir::InferOutputTypes says.
// Errors: a kind without symbolic semantics, attributes or shapes the reference
// kernel would reject.
absl::StatusOr<std::vector<SymTensor>> EvalSymbolic(smt::Terms& terms, ir::OpKind kind,
                                                    absl::Span<const SymTensor* const> in,
                                                    const ir::AttrMap& attrs);

bool HasSymbolicSemantics(ir::OpKind kind);

// Bumped whenever a kind's symbolic kernel changes meaning; part of proof-cache keys.
int SemanticsVersion(ir::OpKind kind);

// Registers with `terms` the numeric meaning of the uninterpreted functions the
// symbolic kernels use for discrete choices ("argmax": index of the first largest
// argument; "topk_index": position j of a stable descending sort of the remaining
// arguments), so that Terms::Evaluate can evaluate their outputs.
void DefineSymbolicFunctions(smt::Terms& terms);

// ---- registration (one function per op family, verify/sym_ops_<family>.cc)
using SymKernelFn = absl::StatusOr<std::vector<SymTensor>> (*)(
    smt::Terms& terms, absl::Span<const SymTensor* const> in, const ir::AttrMap& attrs,
    absl::Span<const ir::TensorType> out_types);

struct SymKernel {
  ir::OpKind kind;
  SymKernelFn fn = nullptr;
  int version = 1;
};

}  // namespace loom::verify

#endif  // LOOM_VERIFY_SYM_OPS_H_
