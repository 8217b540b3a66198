#ifndef LOOM_IR_AUTODIFF_H_
#define LOOM_IR_AUTODIFF_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"

namespace loom::ir {

// Appends to `graph` the backward ops computing d(loss)/d(x) for each x in `wrt`,
// by each op's gradient rule, in reverse creation order. `loss` must be a float
// scalar. Contributions to a tensor used several times are summed (`add`, or
// `accumulate` when more than two). Returns one entry per `wrt` (nullopt when the
// loss does not depend on it). Emitted ops carry phase backward and the layer and
// micro-batch of the forward op they differentiate.
absl::StatusOr<std::vector<std::optional<TensorId>>> AppendBackward(
    Graph& graph, TensorId loss, absl::Span<const TensorId> wrt);

#define LOOM_OPTIMIZER_LIST(X) \
  X(kAdamW, "adamw")           \
  X(kSgd, "sgd")

enum class OptimizerKind {
#define LOOM_OPTIMIZER_ENUM_(e, name) e,
  LOOM_OPTIMIZER_LIST(LOOM_OPTIMIZER_ENUM_)
#undef LOOM_OPTIMIZER_ENUM_
};
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);
absl::string_view OptimizerKindName(OptimizerKind kind);

// The numeric precision of a training step (Megatron-LM's --bf16, or the default).
#define LOOM_PRECISION_LIST(X) \
  X(kBf16, "bf16")             \
  X(kFp32, "fp32")

enum class Precision {
#define LOOM_PRECISION_ENUM_(e, name) e,
  LOOM_PRECISION_LIST(LOOM_PRECISION_ENUM_)
#undef LOOM_PRECISION_ENUM_
};
// "fp32" or "bf16"; anything else is InvalidArgument naming the accepted values.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
absl::string_view PrecisionName(Precision precision);
// The accepted names, in list order: "bf16, fp32".
std::string PrecisionNames();
// The dtype of a model's parameters and activations under `precision`.
DType ModelDType(Precision precision);

struct TrainingOptions {
  int microbatches = 1;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int64_t step = 1;             // optimizer step number, for bias correction
  double max_grad_norm = 1.0;   // global grad-norm clipping; 0 disables it
  // kBf16: mixed precision as Megatron-LM runs it with --bf16 and the distributed
  // optimizer (see BuildTrainingStep); kFp32: every tensor in the forward's dtype.
  Precision precision = Precision::kFp32;
};

// Builds one whole training iteration from a forward graph: the forward graph's
// inputs (role input) are replicated per micro-batch, parameters are shared; each
// micro-batch's loss is scaled by 1/M and differentiated; parameter gradients are
// accumulated across micro-batches, clipped by global norm, and every parameter is
// updated by the optimizer (AdamW states are inputs with role state).
// The forward graph must have exactly one output, a float scalar with role loss.
// Outputs of the result: the total loss, then per parameter its new value (and its
// new optimizer states), in parameter order.
//
// Precision kFp32 keeps every tensor in the forward graph's dtype. Precision
// kBf16 needs a forward graph whose parameters are all bf16 (models built with
// dtype bf16; their cross-entropy runs on logits cast to f32, so the loss is f32)
// and builds Megatron-LM's --bf16 step with the distributed optimizer:
//  - inputs: the bf16 parameters, then per parameter its f32 master copy
//    `<param>.master` (role optimizer state) and, for AdamW, its f32 moments
//    `<param>.m` and `<param>.v`; then the data of each micro-batch;
//  - each micro-batch's bf16 parameter gradient is cast to f32 (the "main
//    gradient", `main_grad.<param>[.mbK]`) before the accumulation across
//    micro-batches, so the data-parallel reduction, the grad-norm clipping and
//    the update all run in f32;
//  - the optimizer updates the master (AdamW's or SGD's first operand), and the
//    new bf16 parameter is a cast of the new master;
//  - outputs: the total loss, then per parameter its new bf16 value `<param>.new`,
//    its new master `<param>.master.new` and, for AdamW, `<param>.m.new` and
//    `<param>.v.new`, in parameter order.
absl::StatusOr<Graph> BuildTrainingStep(const Graph& forward, const TrainingOptions& options);

// The parameter whose f32 master copy `t` is in a mixed-precision step: `t` is a
// step input with role optimizer state named `<param>.master`, and `<param>` is a
// step input with role parameter. nullopt for any other tensor.
std::optional<TensorId> ParameterOfMaster(const Graph& step, TensorId t);

}  // namespace loom::ir

#endif  // LOOM_IR_AUTODIFF_H_
