// DeepSpeed JSON configurations (api/loom.h, ParseDeepSpeedConfig): the file's keys
// as settings under Megatron-LM's names (api/config_settings.h).

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/config_settings.h"
#include "api/loom.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom {
namespace config {
namespace {

// DeepSpeed's keys that shape the plan, and their Megatron-LM names.
constexpr std::pair<const char*, const char*> kDeepSpeedKeys[] = {
    {"train_batch_size", "global_batch_size"},
    {"train_micro_batch_size_per_gpu", "micro_batch_size"},
    {"gradient_accumulation_steps", "gradient_accumulation_steps"},
    {"zero_optimization.stage", "zero_stage"},
    {"bf16.enabled", "bf16"},
    {"bfloat16.enabled", "bf16"},
    {"fp16.enabled", "fp16"},
    {"amp.enabled", "amp"},
    {"gradient_clipping", "clip_grad"},
    {"optimizer.type", "optimizer"},
    {"pipeline.stages", "pipeline_model_parallel_size"},
    {"tensor_parallel.autotp_size", "tensor_model_parallel_size"},
    {"sequence_parallel_size", "sequence_parallel_size"},
};

const char* MegatronName(const std::string& path) {
  for (const auto& [ds, megatron] : kDeepSpeedKeys) {
    if (path == ds) return megatron;
  }
  return nullptr;
}

absl::Status AddObject(const ir::Json& object, const std::string& prefix, Settings& out) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : absl::StrCat(prefix, ".", it.key());
    const ir::Json& v = it.value();
    if (v.is_object()) {
      LOOM_RETURN_IF_ERROR(AddObject(v, path, out));
      continue;
    }
    Setting s;
    const char* megatron = MegatronName(path);
    s.key = megatron != nullptr ? megatron : Canonical(path);
    s.spelled = path;
    s.where = out.origin();
    if (v.is_array()) {
      s.scalar = false;
      s.value = "[list]";
    } else if (v.is_string()) {
      s.value = v.get<std::string>();
    } else if (!v.is_null()) {
      s.value = v.dump();
    }
    if (megatron != nullptr && absl::AsciiStrToLower(s.value) == "auto") {
      if (path == "pipeline.stages") continue;  // the stages the code builds
      return out.Error(s, "'auto' is filled in by the Hugging Face Trainer at launch; give "
                          "the value it stands for");
    }
    LOOM_RETURN_IF_ERROR(out.Add(std::move(s)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Settings> SettingsFromDeepSpeedJson(const std::string& json,
                                                   const std::string& origin) {
  ir::Json root;
  try {
    root = ir::Json::parse(json);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", ir::JsonExceptionMessage(e)));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": a DeepSpeed configuration is a JSON object"));
  }
  Settings settings(origin);
  LOOM_RETURN_IF_ERROR(AddObject(root, "", settings));
  // DeepSpeed clips nothing unless told to (its gradient_clipping defaults to 0).
  if (settings.Find("clip_grad") == nullptr) {
    LOOM_RETURN_IF_ERROR(settings.Add(Setting{.key = "clip_grad",
                                              .spelled = "gradient_clipping",
                                              .value = "0",
                                              .where = absl::StrCat(origin, " (absent: DeepSpeed's default)")}));
  }
  return settings;
}

}  // namespace config

absl::StatusOr<TrainConfig> ParseDeepSpeedConfig(const std::string& json,
                                                 const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(config::Settings settings,
                        config::SettingsFromDeepSpeedJson(json, origin));
  return config::FromSettings(settings);
}

}  // namespace loom
