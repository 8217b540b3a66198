#ifndef LOOM_EXEC_CUDA_OP_CHECKS_H_
#define LOOM_EXEC_CUDA_OP_CHECKS_H_

// Checks the families' dispatch code (<family>_ops.cc) makes before it launches:
// the tensors a launcher indexes and their element types, attributes that more than
// one family reads, and the reference kernels' checks of targets and ids, which only
// the data can answer.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/cuda/device_tensor.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"

namespace loom::exec::cuda {

// ---- tensors ---------------------------------------------------------------------
// The launchers index the tensors they are given and assume one element type: these
// refuse a call with too few (or too many) tensors or with mixed element types.

// At least `min_inputs` inputs and `num_outputs` outputs; every input and the first
// `num_outputs` outputs of out[0]'s element type. Used by the elementwise ops and rope.
absl::Status CheckTensors(ir::OpKind kind, absl::Span<const DeviceTensor> in,
                          size_t min_inputs, absl::Span<DeviceTensor> out, size_t num_outputs);

// Exactly `inputs` inputs and one output, the inputs of the output's element type.
// Used by the pointwise and index ops and by broadcasting add, sub and mul.
absl::Status CheckCounts(ir::OpKind kind, absl::Span<const DeviceTensor> in, size_t inputs,
                         absl::Span<DeviceTensor> out);

// Input and output counts within the op's arity (ir/op_kind.h), whose output count is
// fixed; all tensors of one element type. Used by the norms, softmaxes, losses and
// embeddings.
absl::Status CheckOperands(ir::OpKind kind, absl::Span<const DeviceTensor> in,
                           absl::Span<const DeviceTensor> out);

// Input and output counts within the op's arity (ir/op_kind.h), at least one input,
// and at least one output where attributes decide the count; all tensors of one
// element type. Used by the reductions, shape ops and optimizer updates.
absl::Status CheckArity(ir::OpKind kind, absl::Span<const DeviceTensor> in,
                        absl::Span<const DeviceTensor> out);

// "[2,3]": the dims of `t`, for messages.
std::string DimsString(const DeviceTensor& t);

// ---- attributes ------------------------------------------------------------------

// The attribute `dim`, normalised against `rank` (negative dims count from the end).
absl::StatusOr<int> DimAttr(const ir::AttrMap& attrs, int rank);

// The optional `vocab_begin` of pick, pick_grad, embedding and embedding_grad:
// kNoVocabBegin when absent, otherwise at least 0.
absl::StatusOr<int64_t> VocabBegin(const ir::AttrMap& attrs);

// The required `vocab` of pick_grad and embedding_grad (at least 1). It sizes the
// output, so it must match dim `dim` of `out` for the kernels to stay in bounds.
absl::Status CheckVocab(const ir::AttrMap& attrs, const DeviceTensor& out, int dim);

// ---- targets and ids -------------------------------------------------------------

// The reference kernels refuse targets and ids that are not non-negative integers
// below `upper` (no upper bound when `upper` <= 0): refuse them here too, with the
// reference's words, rather than compute around them.
absl::Status CheckIndices(const DeviceTensor& ids, int64_t upper, const char* what,
                          cudaStream_t stream);

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_OP_CHECKS_H_
