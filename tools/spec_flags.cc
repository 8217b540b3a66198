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

void AddSpecFlags(FlagSet& flags, absl::string_view help_prefix,
                  absl::string_view precision_help) {
  flags.AddString("--config", "FILE",
                  absl::StrCat(help_prefix,
                               "the YAML training configuration the plan was made from "
                               "(`loom plan --config`): its model and sizes"));
  flags.AddString("--model", "NAME", absl::StrCat(help_prefix, "the model the plan was made from"));
  flags.AddBool("--tiny", absl::StrCat(help_prefix, "the model at tiny size"));
  flags.AddString("--layers", "N", absl::StrCat(help_prefix, "the model's layer count"));
  flags.AddString("--batch", "B",
                  absl::StrCat(help_prefix,
                               "sequences per micro-batch (default: the plan's data-parallel "
                               "ranks, expert-parallel ones included)"));
  flags.AddString("--seq", "S", absl::StrCat(help_prefix, "tokens per sequence"));
  flags.AddString("--precision", "P",
                  absl::StrCat(help_prefix, precision_help.empty() ? kPrecisionHelp : precision_help));
  flags.AddString("--max-grad-norm", "X", absl::StrCat(help_prefix, kMaxGradNormHelp));
}

absl::StatusOr<ir::Precision> PrecisionFlag(const FlagSet& flags) {
  const std::optional<std::string> value = flags.GetString("--precision");
  if (!value.has_value()) return ir::Precision::kFp32;
  absl::StatusOr<ir::Precision> precision = ir::ParsePrecision(*value);
  if (!precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("flag '--precision' expects one of ",
                                                   ir::PrecisionNames(), ", got '", *value, "'"));
  }
  return precision;
}

absl::StatusOr<TrainConfig> ConfigFromFlags(const FlagSet& flags, const std::string& path) {
  for (const char* f : {"--dp", "--tp", "--pp", "--vpp", "--sp", "--ep", "--zero",
                        "--microbatches", "--recompute"}) {
    if (flags.Has(f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("give the parallel configuration by --config or by flags, not both (",
                       f, " given beside --config)"));
    }
  }
  LOOM_ASSIGN_OR_RETURN(TrainConfig config, LoadTrainConfig(path));
  if (auto name = flags.GetString("--model")) config.model.name = *name;
  if (flags.GetBool("--tiny")) config.model.tiny = true;
  LOOM_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("--layers", config.model.layers, 1, ir::kMaxLayers));
  config.model.layers = static_cast<int>(layers);
  LOOM_ASSIGN_OR_RETURN(config.model.batch,
                        flags.GetInt("--batch", config.model.batch, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(config.model.seq, flags.GetInt("--seq", config.model.seq, 1, int64_t{1} << 30));
  if (flags.Has("--precision")) {
    LOOM_ASSIGN_OR_RETURN(ir::Precision precision, PrecisionFlag(flags));
    if (precision != config.model.precision) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--precision ", ir::PrecisionName(precision), " conflicts with ", path,
          ", whose training precision is ", ir::PrecisionName(config.model.precision),
          " (give the precision in one place)"));
    }
  }
  if (config.model.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no model named (set loom_model: NAME in the file, or give --model)"));
  }
  return config;
}

absl::StatusOr<double> MaxGradNorm(const FlagSet& flags) {
  return flags.GetDouble("--max-grad-norm", 1.0, 0.0, 1e30);
}

absl::StatusOr<std::string> ModelName(const FlagSet& flags) {
  if (auto name = flags.GetString("--model")) return *name;
  if (auto path = flags.GetString("--config")) {
    LOOM_ASSIGN_OR_RETURN(TrainConfig config, ConfigFromFlags(flags, *path));
    return config.model.name;
  }
  return absl::InvalidArgumentError(
      "missing --model NAME or --config FILE (what the plan was made from)");
}

absl::StatusOr<ir::Graph> SpecForPlan(const FlagSet& flags, const ir::Plan& plan) {
  // One sequence per data-parallel rank by default, as `loom plan` builds it: the
  // expert-parallel axis is carved out of the data-parallel ranks.
  const int64_t data_ranks = plan.mesh.AxisSize("dp") * plan.mesh.AxisSize("ep");
  std::string name;
  models::ModelOptions options;
  ir::Precision precision = ir::Precision::kFp32;
  if (auto path = flags.GetString("--config")) {
    LOOM_ASSIGN_OR_RETURN(TrainConfig config, ConfigFromFlags(flags, *path));
    name = config.model.name;
    options.tiny = config.model.tiny;
    options.layers = config.model.layers;
    options.batch = config.model.batch > 0 ? config.model.batch : data_ranks;
    options.seq = config.model.seq;
    precision = config.model.precision;
  } else {
    auto model = flags.GetString("--model");
    if (!model.has_value()) {
      return absl::InvalidArgumentError(
          "--plan needs the --config or the --model (and size flags) it was made from");
    }
    name = *model;
    options.tiny = flags.GetBool("--tiny");
    LOOM_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("--layers", 0, 1, ir::kMaxLayers));
    options.layers = static_cast<int>(layers);
    LOOM_ASSIGN_OR_RETURN(options.batch, flags.GetInt("--batch", data_ranks, 1, int64_t{1} << 30));
    LOOM_ASSIGN_OR_RETURN(options.seq, flags.GetInt("--seq", 0, 1, int64_t{1} << 30));
    LOOM_ASSIGN_OR_RETURN(precision, PrecisionFlag(flags));
  }
  options.dtype = ir::ModelDType(precision);
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, models::BuildForward(name, options));
  ir::TrainingOptions training;
  training.precision = precision;
  int64_t planned = 1;
  if (plan.factoring.has_value()) {
    planned = plan.factoring->microbatches;
  } else {
    for (const ir::Task& t : plan.tasks) planned = std::max<int64_t>(planned, t.info.microbatch + 1);
  }
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches, flags.GetInt("--microbatches", planned, 1, ir::kMaxMicrobatches));
  training.microbatches = static_cast<int>(microbatches);
  LOOM_ASSIGN_OR_RETURN(training.max_grad_norm, MaxGradNorm(flags));
  LOOM_ASSIGN_OR_RETURN(ir::Graph step, ir::BuildTrainingStep(forward, training));
  // A plan made in the other precision: say so rather than list mismatched values.
  for (const ir::PlanValue& v : plan.values) {
    if (v.sub.tensor < 0 || v.sub.tensor >= step.num_tensors()) continue;
    const ir::Tensor& t = step.tensor(v.sub.tensor);
    if (t.role != ir::TensorRole::kParameter || t.producer != ir::kNoId || v.dtype == t.dtype) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan holds parameter '", t.name, "' in ", ir::DTypeName(v.dtype), ", the ",
        ir::PrecisionName(precision), " step in ", ir::DTypeName(t.dtype),
        " (give the precision the plan was made with: --precision, or bf16 in --config)"));
  }
  return step;
}

}  // namespace loom::tools
