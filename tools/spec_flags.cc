#include "tools/spec_flags.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "ir/status_macros.h"
#include "models/models.h"

namespace loom::tools {

void AddSpecFlags(FlagSet& flags, absl::string_view help_prefix) {
  flags.AddString("--model", "NAME", absl::StrCat(help_prefix, "the model the plan was made from"));
  flags.AddBool("--tiny", absl::StrCat(help_prefix, "the model at tiny size"));
  flags.AddString("--layers", "N", absl::StrCat(help_prefix, "the model's layer count"));
  flags.AddString("--batch", "B",
                  absl::StrCat(help_prefix,
                               "sequences per micro-batch (default: the plan's data-parallel "
                               "ranks, expert-parallel ones included)"));
  flags.AddString("--seq", "S", absl::StrCat(help_prefix, "tokens per sequence"));
  flags.AddString("--max-grad-norm", "X", absl::StrCat(help_prefix, kMaxGradNormHelp));
}

absl::StatusOr<double> MaxGradNorm(const FlagSet& flags) {
  return flags.GetDouble("--max-grad-norm", 1.0, 0.0, 1e30);
}

absl::StatusOr<ir::Graph> SpecForPlan(const FlagSet& flags, const ir::Plan& plan) {
  auto name = flags.GetString("--model");
  if (!name.has_value()) {
    return absl::InvalidArgumentError("--plan needs the --model (and size flags) it was made from");
  }
  models::ModelOptions options;
  options.tiny = flags.GetBool("--tiny");
  LOOM_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("--layers", 0, 1, ir::kMaxLayers));
  options.layers = static_cast<int>(layers);
  // One sequence per data-parallel rank by default, as `loom plan` builds it: the
  // expert-parallel axis is carved out of the data-parallel ranks.
  const int64_t data_ranks = plan.mesh.AxisSize("dp") * plan.mesh.AxisSize("ep");
  LOOM_ASSIGN_OR_RETURN(options.batch, flags.GetInt("--batch", data_ranks, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(options.seq, flags.GetInt("--seq", 0, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, models::BuildForward(*name, options));
  ir::TrainingOptions training;
  int64_t planned = 1;
  if (plan.factoring.has_value()) {
    planned = plan.factoring->microbatches;
  } else {
    for (const ir::Task& t : plan.tasks) planned = std::max<int64_t>(planned, t.info.microbatch + 1);
  }
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches, flags.GetInt("--microbatches", planned, 1, ir::kMaxMicrobatches));
  training.microbatches = static_cast<int>(microbatches);
  LOOM_ASSIGN_OR_RETURN(training.max_grad_norm, MaxGradNorm(flags));
  return ir::BuildTrainingStep(forward, training);
}

}  // namespace loom::tools
