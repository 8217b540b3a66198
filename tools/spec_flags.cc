#include "tools/spec_flags.h"

#include <algorithm>
#include <filesystem>
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/autodiff.h"
#include "ir/plan_json.h"
#include "ir/status_macros.h"
#include "tools/terminal_status.h"

namespace loom::tools {
namespace {

std::string Number(double v) { return absl::StrFormat("%g", v); }

}  // namespace

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

std::string ConfigOrigin(const FlagSet& flags) {
  if (auto path = flags.GetString("--config")) return *path;
  const std::string args = flags.GetString("--megatron-args").value_or("");
  return args.size() > 1 && args[0] == '@' ? args.substr(1) : "--megatron-args";
}

absl::StatusOr<std::optional<TrainConfig>> ConfigFromFlags(const FlagSet& flags) {
  const std::optional<std::string> file = flags.GetString("--config");
  const std::optional<std::string> args = flags.GetString("--megatron-args");
  if (!file.has_value() && !args.has_value()) return std::nullopt;
  if (file.has_value() && args.has_value()) {
    return absl::InvalidArgumentError(
        "give --config or --megatron-args, not both (a Megatron-DeepSpeed command line names "
        "its DeepSpeed file itself: --deepspeed_config FILE)");
  }
  const char* given = file.has_value() ? "--config" : "--megatron-args";
  for (const char* f : {"--dp", "--tp", "--pp", "--vpp", "--sp", "--ep", "--cp", "--zero",
                        "--microbatches", "--recompute"}) {
    if (flags.Has(f)) {
      return absl::InvalidArgumentError(absl::StrCat("give the parallel configuration by ",
                                                     given, " or by flags, not both (", f,
                                                     " given beside ", given, ")"));
    }
  }
  const std::string path = ConfigOrigin(flags);
  absl::StatusOr<TrainConfig> loaded;
  if (file.has_value()) {
    loaded = LoadTrainConfig(*file);
  } else if (args->size() > 1 && (*args)[0] == '@') {
    loaded = LoadMegatronArgs(path);
  } else {
    loaded = ParseMegatronArgs(*args, path);
  }
  if (!loaded.ok()) return loaded.status();
  TrainConfig config = *std::move(loaded);
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
  if (flags.Has("--max-grad-norm")) {
    LOOM_ASSIGN_OR_RETURN(double max_grad_norm, MaxGradNorm(flags));
    const bool clip_given = std::find(config.read.begin(), config.read.end(), "clip_grad") !=
                            config.read.end();
    if (clip_given && max_grad_norm != config.model.max_grad_norm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-grad-norm ", Number(max_grad_norm), " conflicts with ", path,
          ", whose clip_grad is ", Number(config.model.max_grad_norm),
          " (give the clipping threshold in one place)"));
    }
    config.model.max_grad_norm = max_grad_norm;
  }
  if (config.model.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": no model named (give --model NAME, or set loom_model: NAME in a YAML file)"));
  }
  LOOM_RETURN_IF_ERROR(CheckArchitecture(config));
  return std::optional<TrainConfig>(std::move(config));
}

absl::StatusOr<ir::Plan> LoadPlanShowingProgress(const std::string& path,
                                                 absl::string_view command, bool quiet) {
  constexpr int64_t kLargePlanBytes = int64_t{32} << 20;  // about a second to read
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  TerminalStatus status(command, std::cerr,
                        quiet || ec || static_cast<int64_t>(size) < kLargePlanBytes);
  const double mb = ec ? 0 : static_cast<double>(size) / 1e6;
  status.Step(absl::StrCat("reading ", path,
                           mb >= 1000 ? absl::StrFormat(" (%.1f GB)", mb / 1e3)
                                      : absl::StrFormat(" (%.0f MB)", mb)));
  return ir::LoadPlanFile(path);
}

absl::StatusOr<double> MaxGradNorm(const FlagSet& flags) {
  return flags.GetDouble("--max-grad-norm", 1.0, 0.0, 1e30);
}

absl::StatusOr<std::string> ModelName(const FlagSet& flags) {
  if (auto name = flags.GetString("--model")) return *name;
  LOOM_ASSIGN_OR_RETURN(std::optional<TrainConfig> config, ConfigFromFlags(flags));
  if (config.has_value()) return config->model.name;
  return absl::InvalidArgumentError(
      "missing --model NAME or --config FILE (what the plan was made from)");
}

namespace {

constexpr char kNoRecordedStep[] =
    "the plan does not record the step it was made from (it was written before plans carried "
    "their step, or not by 'loom plan'): give the --model (and size flags) or the --config it "
    "was made from";

// A flag's value against the one the plan records: equal, or an error naming both.
absl::Status Agrees(absl::string_view what, const std::string& given, const std::string& recorded) {
  if (given == recorded) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", given, " disagrees with the plan, which was made with ", what, " ", recorded,
      " (the plan carries its step: leave the model flags out, or plan again)"));
}

// The model flags (or --config) given beside a plan that records its step: each
// must say what the plan says.
absl::Status CheckAgainstRecord(const FlagSet& flags, const ir::PlanStepSource& s) {
  const ir::TrainingOptions& t = s.training;
  LOOM_ASSIGN_OR_RETURN(std::optional<TrainConfig> loaded, ConfigFromFlags(flags));
  if (loaded.has_value()) {
    const TrainConfig& config = *loaded;
    const ModelConfig& m = config.model;
    const std::string in = absl::StrCat(ConfigOrigin(flags), ": ");
    LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "model"), m.name, s.model));
    LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "tiny"), m.tiny ? "true" : "false",
                                s.tiny ? "true" : "false"));
    if (m.layers > 0) {
      LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "num_layers"), absl::StrCat(m.layers),
                                  absl::StrCat(s.layers)));
    }
    if (m.seq > 0) {
      LOOM_RETURN_IF_ERROR(
          Agrees(absl::StrCat(in, "seq_length"), absl::StrCat(m.seq), absl::StrCat(s.seq)));
    }
    if (m.batch > 0) {
      LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "sequences per micro-batch"),
                                  absl::StrCat(m.batch), absl::StrCat(s.batch)));
    }
    LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "micro-batches"),
                                absl::StrCat(config.parallel.microbatches),
                                absl::StrCat(t.microbatches)));
    LOOM_RETURN_IF_ERROR(Agrees(absl::StrCat(in, "precision"), ir::PrecisionName(m.precision).data(),
                                ir::PrecisionName(t.precision).data()));
    return Agrees(absl::StrCat(in, "gradient clipping"), Number(m.max_grad_norm),
                  Number(t.max_grad_norm));
  }
  if (auto model = flags.GetString("--model")) {
    LOOM_RETURN_IF_ERROR(Agrees("--model", *model, s.model));
  }
  if (flags.GetBool("--tiny") && !s.tiny) {
    return absl::InvalidArgumentError(
        "--tiny disagrees with the plan, which was made at full size (the plan carries its "
        "step: leave the model flags out, or plan again)");
  }
  struct IntFlag {
    const char* name;
    int64_t recorded;
  };
  for (const IntFlag& f : {IntFlag{"--layers", s.layers}, IntFlag{"--batch", s.batch},
                           IntFlag{"--seq", s.seq}, IntFlag{"--microbatches", t.microbatches}}) {
    if (!flags.Has(f.name)) continue;
    LOOM_ASSIGN_OR_RETURN(int64_t v, flags.GetInt(f.name, 0, 1, int64_t{1} << 40));
    LOOM_RETURN_IF_ERROR(Agrees(f.name, absl::StrCat(v), absl::StrCat(f.recorded)));
  }
  if (flags.Has("--precision")) {
    LOOM_ASSIGN_OR_RETURN(ir::Precision precision, PrecisionFlag(flags));
    LOOM_RETURN_IF_ERROR(Agrees("--precision", ir::PrecisionName(precision).data(),
                                ir::PrecisionName(t.precision).data()));
  }
  if (flags.Has("--max-grad-norm")) {
    LOOM_ASSIGN_OR_RETURN(double v, MaxGradNorm(flags));
    LOOM_RETURN_IF_ERROR(Agrees("--max-grad-norm", Number(v), Number(t.max_grad_norm)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ModelName(const FlagSet& flags, const ir::Plan& plan) {
  if (plan.step.has_value()) {
    LOOM_RETURN_IF_ERROR(CheckAgainstRecord(flags, *plan.step));
    return plan.step->model;
  }
  if (!flags.Has("--model") && !flags.Has("--config") && !flags.Has("--megatron-args")) {
    return absl::InvalidArgumentError(kNoRecordedStep);
  }
  return ModelName(flags);
}

absl::StatusOr<ir::Graph> SpecForPlan(const FlagSet& flags, const ir::Plan& plan) {
  if (plan.step.has_value()) {
    LOOM_RETURN_IF_ERROR(CheckAgainstRecord(flags, *plan.step));
    return BuildStep(*plan.step);
  }
  // One sequence per data-parallel rank by default, as `loom plan` builds it: the
  // expert-parallel axis is carved out of the data-parallel ranks. Sizes left 0
  // are the model's own.
  const int64_t data_ranks = plan.mesh.AxisSize("dp") * plan.mesh.AxisSize("ep");
  ir::PlanStepSource source;
  LOOM_ASSIGN_OR_RETURN(std::optional<TrainConfig> loaded, ConfigFromFlags(flags));
  if (loaded.has_value()) {
    const ModelConfig& model = loaded->model;
    source.model = model.name;
    source.tiny = model.tiny;
    source.layers = model.layers;
    source.batch = model.batch > 0 ? model.batch : data_ranks;
    source.seq = model.seq;
    source.training.precision = model.precision;
  } else {
    auto model = flags.GetString("--model");
    if (!model.has_value()) {
      return absl::InvalidArgumentError(kNoRecordedStep);
    }
    source.model = *model;
    source.tiny = flags.GetBool("--tiny");
    LOOM_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("--layers", 0, 1, ir::kMaxLayers));
    source.layers = static_cast<int>(layers);
    LOOM_ASSIGN_OR_RETURN(source.batch, flags.GetInt("--batch", data_ranks, 1, int64_t{1} << 30));
    LOOM_ASSIGN_OR_RETURN(source.seq, flags.GetInt("--seq", 0, 1, int64_t{1} << 30));
    LOOM_ASSIGN_OR_RETURN(source.training.precision, PrecisionFlag(flags));
  }
  int64_t planned = 1;
  if (plan.factoring.has_value()) {
    planned = plan.factoring->microbatches;
  } else {
    for (const ir::Task& t : plan.tasks) planned = std::max<int64_t>(planned, t.info.microbatch + 1);
  }
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches, flags.GetInt("--microbatches", planned, 1, ir::kMaxMicrobatches));
  source.training.microbatches = static_cast<int>(microbatches);
  if (loaded.has_value()) {
    // The configuration's clip_grad (ConfigFromFlags has checked --max-grad-norm against it).
    source.training.max_grad_norm = loaded->model.max_grad_norm;
  } else {
    LOOM_ASSIGN_OR_RETURN(source.training.max_grad_norm, MaxGradNorm(flags));
  }
  LOOM_ASSIGN_OR_RETURN(ir::Graph step, BuildStep(source));
  const ir::Precision precision = source.training.precision;
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
