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
};

// Builds one whole training iteration from a forward graph: the forward graph's
// inputs (role input) are replicated per micro-batch, parameters are shared; each
// micro-batch's loss is scaled by 1/M and differentiated; parameter gradients are
// accumulated across micro-batches, clipped by global norm, and every parameter is
// updated by the optimizer (AdamW states are inputs with role state).
// The forward graph must have exactly one output, a float scalar with role loss.
// Outputs of the result: the total loss, then per parameter its new value (and its
// new optimizer states), in parameter order.
absl::StatusOr<Graph> BuildTrainingStep(const Graph& forward, const TrainingOptions& options);

}  // namespace loom::ir

#endif  // LOOM_IR_AUTODIFF_H_
