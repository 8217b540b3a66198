#ifndef LOOM_TOOLS_SPEC_FLAGS_H_
#define LOOM_TOOLS_SPEC_FLAGS_H_

// The model flags of commands that read a plan file: the logical training step a
// plan was made from is rebuilt from the flags `loom plan` took.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/loom.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "tools/flags.h"

namespace loom::tools {

// Declares --config, --model, --tiny, --layers, --batch, --seq, --precision and
// --max-grad-norm, each help text starting with `help_prefix` ("with --plan: ");
// --precision's help is `precision_help` (kPrecisionHelp unless the command reads
// more values from it).
void AddSpecFlags(FlagSet& flags, absl::string_view help_prefix = "",
                  absl::string_view precision_help = "");

// The training configuration of `path` (--config); the model flags, when given,
// override its model fields, and no parallel flag may be given beside it.
// --precision may be given beside it only when it says what the file says.
absl::StatusOr<TrainConfig> ConfigFromFlags(const FlagSet& flags, const std::string& path);

// --max-grad-norm: the global gradient-norm clipping threshold of the training
// step (default 1; 0 turns clipping off). Declared by AddSpecFlags and by the
// commands that build a step (plan, graph).
inline constexpr char kMaxGradNormHelp[] =
    "global gradient-norm clipping threshold of the step (default 1, 0: none)";
absl::StatusOr<double> MaxGradNorm(const FlagSet& flags);

// --precision: fp32 (default) or bf16, Megatron-LM's --bf16 step (ir::Precision).
// Declared by AddSpecFlags and by the commands that build a step (plan, graph,
// show). Any other value is InvalidArgument naming the accepted ones.
inline constexpr char kPrecisionHelp[] =
    "training precision: fp32 (default) or bf16 (bf16 parameters and activations; f32 "
    "main gradients, master weights and Adam moments, as Megatron-LM's --bf16)";
absl::StatusOr<ir::Precision> PrecisionFlag(const FlagSet& flags);

// The name of the model the plan was made from: --model, else the --config file's.
absl::StatusOr<std::string> ModelName(const FlagSet& flags);

// The logical training step a plan was made from, rebuilt from the same model flags
// `loom plan` took, or from the same --config file (batch defaults to the plan's
// data-parallel size, micro-batches to its own count; --microbatches, when the
// command declares it, overrides).
absl::StatusOr<ir::Graph> SpecForPlan(const FlagSet& flags, const ir::Plan& plan);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_SPEC_FLAGS_H_
