// The row-wise op family of the CUDA backend: normalisations, softmaxes, the loss
// pieces and the embedding lookup. Reads the attributes the reference kernels read
// (same names, defaults and checks: ir/ops/norm.cc, ir/ops/loss.cc, ir/ops/matmul.cc)
// and calls the launchers of rowwise_kernels.h.
//
// The reference also rejects values it only sees in the data: a target outside the
// vocabulary (cross_entropy, cross_entropy_grad, pick and pick_grad without
// vocab_begin) or an id that is not a valid table row (embedding, embedding_grad).
// The kernels cannot report those; they skip such positions, leaving their outputs
// zero, and the error stays the reference's only.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/check_kernels.h"
#include "exec/cuda/rowwise_kernels.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

constexpr double kDefaultEps = 1e-5;  // the norms' default, as in ir/ops/norm.cc

// ---- attributes -------------------------------------------------------------------

// `eps` of the norms: 1e-5 when absent, and non-negative.
absl::StatusOr<double> Eps(const ir::AttrMap& attrs) {
  LOOM_ASSIGN_OR_RETURN(double eps, attrs.GetFloat("eps", kDefaultEps));
  if (!(eps >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'eps' is ", eps, ", expected a non-negative number"));
  }
  return eps;
}

// The optional `vocab_begin` of pick, pick_grad, embedding and embedding_grad:
// kNoVocabBegin when absent, otherwise at least 0.
absl::StatusOr<int64_t> VocabBegin(const ir::AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return kNoVocabBegin;
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("vocab_begin"));
  if (begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab_begin' is ", begin, ", expected at least 0"));
  }
  return begin;
}

// The reference kernels refuse targets and ids that are not non-negative integers
// below `upper` (no upper bound when `upper` <= 0): refuse them here too, with the
// reference's words, rather than compute around them.
absl::Status CheckIndices(const DeviceTensor& ids, int64_t upper, const char* what,
                          cudaStream_t stream) {
  int64_t position = -1;
  double value = 0;
  if (absl::Status s = CudaError(FindBadIndex(ids, upper, stream, &position, &value), what);
      !s.ok()) {
    return s;
  }
  if (position < 0) return absl::OkStatus();
  if (upper > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", value, " at position ", position,
                                                   " is outside [0, ", upper, ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", value, " at position ", position, " is not a non-negative integer"));
}

// The required `vocab` of pick_grad and embedding_grad (at least 1). It sizes the
// output, so it must match dim `dim` of `out` for the kernels to stay in bounds.
absl::Status CheckVocab(const ir::AttrMap& attrs, const DeviceTensor& out, int dim) {
  LOOM_ASSIGN_OR_RETURN(int64_t vocab, attrs.GetInt("vocab"));
  if (vocab < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab' is ", vocab, ", expected at least 1"));
  }
  const int64_t extent = dim >= 0 && dim < out.rank ? out.dims[dim] : -1;
  if (vocab != extent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'vocab' is ", vocab, " but the output has ", extent, " at dim ", dim));
  }
  return absl::OkStatus();
}

// The optional `count` of the losses: the number of positions the loss averages over.
// Default: the positions of `logits` (every dim but the last).
absl::StatusOr<int64_t> TokenCount(const DeviceTensor& logits, const ir::AttrMap& attrs) {
  if (!attrs.Has("count")) return logits.Product(0, logits.rank - 1);
  LOOM_ASSIGN_OR_RETURN(int64_t count, attrs.GetInt("count"));
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'count' is ", count, ", expected at least 1"));
  }
  return count;
}

// ---- checks -----------------------------------------------------------------------

bool IsRowwise(OpKind kind) {
  switch (kind) {
    case OpKind::kRmsNorm:
    case OpKind::kRmsNormGrad:
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormGrad:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmax:
    case OpKind::kLogSoftmaxGrad:
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyGrad:
    case OpKind::kPick:
    case OpKind::kPickGrad:
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingGrad:
      return true;
    default:
      return false;
  }
}

// The launchers index `in` and `out` by position and read one element type for all
// of them: check both before any launch.
absl::Status CheckOperands(OpKind kind, absl::Span<const DeviceTensor> in,
                           absl::Span<const DeviceTensor> out) {
  const ir::OpArity arity = ir::GetOpArity(kind);
  if (static_cast<int>(in.size()) < arity.min_inputs ||
      (arity.max_inputs >= 0 && static_cast<int>(in.size()) > arity.max_inputs) ||
      static_cast<int>(out.size()) != arity.num_outputs) {
    return absl::InvalidArgumentError(absl::StrCat(ir::OpKindName(kind), " got ", in.size(),
                                                   " inputs and ", out.size(), " outputs"));
  }
  const bool f64 = in.empty() ? out[0].f64 : in[0].f64;
  for (const DeviceTensor& t : in) {
    if (t.f64 != f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes float and double tensors"));
    }
  }
  for (const DeviceTensor& t : out) {
    if (t.f64 != f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes float and double tensors"));
    }
  }
  return absl::OkStatus();
}

// OK, or the launch failure named after the op.
absl::Status Launched(OpKind kind, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string name(ir::OpKindName(kind));
  return CudaError(err, name.c_str());
}

}  // namespace

absl::Status RunRowwiseOp(ir::OpKind kind, const ir::AttrMap& attrs,
                          absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                          const OpContext& ctx) {
  if (!IsRowwise(kind)) {
    return absl::UnimplementedError(
        absl::StrCat("no CUDA row-wise kernel for ", ir::OpKindName(kind)));
  }
  LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
  cudaStream_t stream = ctx.stream;
  switch (kind) {
    case OpKind::kRmsNorm: {  // (x, gamma) -> y
      LOOM_ASSIGN_OR_RETURN(double eps, Eps(attrs));
      return Launched(kind, LaunchRmsNorm(in[0], in[1], eps, out[0], stream));
    }
    case OpKind::kRmsNormGrad: {  // (x, gamma, dy) -> (dx, dgamma)
      LOOM_ASSIGN_OR_RETURN(double eps, Eps(attrs));
      return Launched(kind, LaunchRmsNormGrad(in[0], in[1], in[2], eps, out[0], out[1], stream));
    }
    case OpKind::kLayerNorm: {  // (x, gamma, beta) -> y
      LOOM_ASSIGN_OR_RETURN(double eps, Eps(attrs));
      return Launched(kind, LaunchLayerNorm(in[0], in[1], in[2], eps, out[0], stream));
    }
    case OpKind::kLayerNormGrad: {  // (x, gamma, dy) -> (dx, dgamma, dbeta)
      LOOM_ASSIGN_OR_RETURN(double eps, Eps(attrs));
      return Launched(
          kind, LaunchLayerNormGrad(in[0], in[1], in[2], eps, out[0], out[1], out[2], stream));
    }
    case OpKind::kSoftmax:  // (x) -> y
      return Launched(kind, LaunchSoftmax(in[0], out[0], stream));
    case OpKind::kLogSoftmax:  // (x) -> y
      return Launched(kind, LaunchLogSoftmax(in[0], out[0], stream));
    case OpKind::kSoftmaxGrad:  // (y, dy) -> dx
      return Launched(kind, LaunchSoftmaxGrad(in[0], in[1], out[0], stream));
    case OpKind::kLogSoftmaxGrad:  // (y, dy) -> dx
      return Launched(kind, LaunchLogSoftmaxGrad(in[0], in[1], out[0], stream));
    case OpKind::kCrossEntropy: {  // (logits, targets) -> loss
      LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(in[0], attrs));
      LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      return Launched(kind, LaunchCrossEntropy(in[0], in[1], count, out[0], stream));
    }
    case OpKind::kCrossEntropyGrad: {  // (logits, targets, dloss) -> dlogits
      LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(in[0], attrs));
      LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      return Launched(kind, LaunchCrossEntropyGrad(in[0], in[1], in[2], count, out[0], stream));
    }
    case OpKind::kPick: {  // (x, targets) -> y
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      if (begin == kNoVocabBegin) {
        LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      }
      return Launched(kind, LaunchPick(in[0], in[1], begin, out[0], stream));
    }
    case OpKind::kPickGrad: {  // (targets, dy) -> dx [..., vocab]
      LOOM_RETURN_IF_ERROR(CheckVocab(attrs, out[0], out[0].rank - 1));
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      if (begin == kNoVocabBegin) {
        LOOM_RETURN_IF_ERROR(
            CheckIndices(in[0], out[0].dim(out[0].rank - 1), "target", stream));
      }
      return Launched(kind, LaunchPickGrad(in[0], in[1], begin, out[0], stream));
    }
    case OpKind::kEmbedding: {  // (ids, table) -> out
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      LOOM_RETURN_IF_ERROR(
          CheckIndices(in[0], begin == kNoVocabBegin ? in[1].dim(0) : 0, "id", stream));
      return Launched(kind, LaunchEmbedding(in[0], in[1], begin, out[0], stream));
    }
    case OpKind::kEmbeddingGrad: {  // (ids, dy) -> dtable [vocab, d]
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      LOOM_RETURN_IF_ERROR(CheckVocab(attrs, out[0], 0));
      LOOM_RETURN_IF_ERROR(
          CheckIndices(in[0], begin == kNoVocabBegin ? out[0].dim(0) : 0, "id", stream));
      return Launched(kind, LaunchEmbeddingGrad(in[0], in[1], begin, out[0], stream));
    }
    default:
      break;
  }
  return absl::UnimplementedError(
      absl::StrCat("no CUDA row-wise kernel for ", ir::OpKindName(kind)));
}

}  // namespace loom::exec::cuda
