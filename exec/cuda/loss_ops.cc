// The loss family of the CUDA backend: cross_entropy, pick and their gradients.
// Reads the attributes the reference kernels read (same names, defaults and checks:
// ir/ops/loss.cc) and calls the launchers of loss_kernels.h.
//
// The reference rejects a target outside the vocabulary (cross_entropy,
// cross_entropy_grad, pick and pick_grad without vocab_begin), a value only the data
// shows; these ops check the targets before they launch and refuse them with the
// reference's words.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/loss_kernels.h"
#include "exec/cuda/op_checks.h"
#include "exec/cuda/vocab.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {
namespace {

using ir::OpKind;

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

bool Owns(OpKind kind) {
  switch (kind) {
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyGrad:
    case OpKind::kPick:
    case OpKind::kPickGrad:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status RunLossOp(ir::OpKind kind, const ir::AttrMap& attrs,
                       absl::Span<const DeviceTensor> in, absl::Span<DeviceTensor> out,
                       const OpContext& ctx) {
  if (!Owns(kind)) return NotInFamily(kind, "loss");
  LOOM_RETURN_IF_ERROR(CheckOperands(kind, in, out));
  cudaStream_t stream = ctx.stream;
  switch (kind) {
    case OpKind::kCrossEntropy: {  // (logits, targets) -> loss
      LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(in[0], attrs));
      LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      return LaunchStatus(LaunchCrossEntropy(in[0], in[1], count, out[0], stream), kind);
    }
    case OpKind::kCrossEntropyGrad: {  // (logits, targets, dloss) -> dlogits
      LOOM_ASSIGN_OR_RETURN(int64_t count, TokenCount(in[0], attrs));
      LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      return LaunchStatus(LaunchCrossEntropyGrad(in[0], in[1], in[2], count, out[0], stream), kind);
    }
    case OpKind::kPick: {  // (x, targets) -> y
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      if (begin == kNoVocabBegin) {
        LOOM_RETURN_IF_ERROR(CheckIndices(in[1], in[0].dim(in[0].rank - 1), "target", stream));
      }
      return LaunchStatus(LaunchPick(in[0], in[1], begin, out[0], stream), kind);
    }
    case OpKind::kPickGrad: {  // (targets, dy) -> dx [..., vocab]
      LOOM_RETURN_IF_ERROR(CheckVocab(attrs, out[0], out[0].rank - 1));
      LOOM_ASSIGN_OR_RETURN(int64_t begin, VocabBegin(attrs));
      if (begin == kNoVocabBegin) {
        LOOM_RETURN_IF_ERROR(
            CheckIndices(in[0], out[0].dim(out[0].rank - 1), "target", stream));
      }
      return LaunchStatus(LaunchPickGrad(in[0], in[1], begin, out[0], stream), kind);
    }
    default:
      break;
  }
  return NotInFamily(kind, "loss");
}

}  // namespace loom::exec::cuda
