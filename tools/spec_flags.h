#ifndef LOOM_TOOLS_SPEC_FLAGS_H_
#define LOOM_TOOLS_SPEC_FLAGS_H_

// The model flags of commands that read a plan file: the logical training step a
// plan was made from is rebuilt from the flags `loom plan` took.

#include <optional>
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

// The training configuration the flags name: --config FILE (YAML, or DeepSpeed
// JSON) or --megatron-args ARGS (a Megatron-LM command line, or @FILE holding
// one); nullopt when neither. The model flags, when given, override its model
// fields, and no parallel flag may be given beside it. --precision and
// --max-grad-norm may be given beside it only when they say what it says.
absl::StatusOr<std::optional<TrainConfig>> ConfigFromFlags(const FlagSet& flags);
// Where that configuration comes from, for messages: the file, or "--megatron-args".
std::string ConfigOrigin(const FlagSet& flags);

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

// Reads a plan file; on a terminal (standard error), a plan large enough to take
// seconds says so while it is read ("search: reading plan.json (1.8 GB)").
absl::StatusOr<ir::Plan> LoadPlanShowingProgress(const std::string& path,
                                                 absl::string_view command, bool quiet = false);

// The name of the model the plan was made from: --model, else the --config file's.
absl::StatusOr<std::string> ModelName(const FlagSet& flags);
// The same for a loaded plan: the model its step records (the model flags, when
// given, must agree with it), else ModelName(flags).
absl::StatusOr<std::string> ModelName(const FlagSet& flags, const ir::Plan& plan);

// The logical training step a plan was made from, built by loom::BuildStep: the
// step the plan records (ir::Plan::step; a model flag or --config given beside it
// must agree, else an error names both values), or, for a plan that records none,
// rebuilt from the same model flags `loom plan` took or the same --config file
// (batch defaults to the plan's data-parallel size, micro-batches to its own count;
// --microbatches, when the command declares it, overrides).
absl::StatusOr<ir::Graph> SpecForPlan(const FlagSet& flags, const ir::Plan& plan);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_SPEC_FLAGS_H_
