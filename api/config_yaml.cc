// Megatron-LM and NeMo YAML training configurations (api/loom.h, ParseTrainConfig):
// the file's keys as settings (api/config_settings.h).

#include <yaml-cpp/yaml.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "api/config_settings.h"
#include "api/loom.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom {
namespace config {
namespace {

std::string Where(const std::string& origin, const YAML::Mark& mark) {
  return absl::StrCat(origin, ":", mark.line + 1, ":", mark.column + 1);
}

// The entries of `map` as settings: a nested map's under dotted keys
// ("trainer.precision"), but NeMo's `model:` and Megatron-LM's `MODEL_ARGS:`
// maps, whose keys are the configuration's own.
absl::Status AddMap(const YAML::Node& map, const std::string& prefix,
                    const std::string& spelled_prefix, Settings& out) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;  // a copy: it->second lives in a temporary
    const std::string raw = key_node.IsScalar() ? key_node.Scalar() : "";
    const std::string key = Canonical(raw);
    if (value.IsMap() && prefix.empty() && (key == "model" || key == "MODEL_ARGS")) {
      LOOM_RETURN_IF_ERROR(AddMap(value, "", "", out));
      continue;
    }
    Setting s;
    s.key = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
    s.spelled = spelled_prefix.empty() ? raw : absl::StrCat(spelled_prefix, ".", raw);
    s.where = Where(out.origin(), key_node.Mark());
    if (value.IsMap()) {
      LOOM_RETURN_IF_ERROR(AddMap(value, s.key, s.spelled, out));
      continue;
    }
    if (value.IsSequence()) {
      s.scalar = false;
      s.value = "[list]";
    } else if (!value.IsNull()) {
      s.value = value.Scalar();
    }
    LOOM_RETURN_IF_ERROR(out.Add(std::move(s)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Settings> SettingsFromYaml(const std::string& yaml, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(origin, e.mark), ": ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": a training configuration is a map of keys"));
  }
  Settings settings(origin);
  try {
    LOOM_RETURN_IF_ERROR(AddMap(root, "", "", settings));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(origin, e.mark), ": ", e.msg));
  }
  return settings;
}

}  // namespace config

absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& yaml, const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(config::Settings settings, config::SettingsFromYaml(yaml, origin));
  return config::FromSettings(settings);
}

absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  // A training configuration is a few hundred lines.
  constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;
  LOOM_ASSIGN_OR_RETURN(const std::string text, ir::ReadTextFile(path, kMaxConfigBytes));
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return ParseDeepSpeedConfig(text, path);
  }
  return ParseTrainConfig(text, path);
}

}  // namespace loom
