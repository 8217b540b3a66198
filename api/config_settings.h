#ifndef LOOM_API_CONFIG_SETTINGS_H_
#define LOOM_API_CONFIG_SETTINGS_H_

// The settings of a training configuration in one form, whatever it was written in
// (a Megatron-LM or NeMo YAML file, a Megatron-LM command line, a DeepSpeed JSON
// file), and the one reading of them into a TrainConfig. Each reader only turns
// its syntax into settings named as Megatron-LM names its arguments (dashes as
// underscores: `tensor-model-parallel-size`, `--tensor-model-parallel-size` and
// `tensor_model_parallel_size` are one key); what a key means is decided here,
// once.
//
// Every key is accounted for: read (it shapes the plan), refused (a setting Loom
// does not model, unless it says what Loom builds anyway), named as ignored (a
// setting that does not shape the step: learning rates, data paths, logging,
// communication overlap, the model's architecture, which is the zoo model's), or,
// unknown to Loom, refused with the key it resembles when its name speaks of
// what shapes a plan (parallel sizes, batches, layers, precision, recomputation,
// ZeRO, clipping) and named as ignored otherwise. Nothing is dropped silently.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/loom.h"

namespace loom::config {

struct Setting {
  std::string key;      // canonical: Megatron-LM's argument name, underscores
  std::string spelled;  // as written: "tensor-model-parallel-size", "zero_optimization.stage"
  std::string value;    // scalar text; "true" for a bare switch; "" for null
  bool scalar = true;   // false: a list or a map
  std::string where;    // "t.yaml:4:1", "args.txt: argument 7"
};

// Megatron-LM's name of a key as written: leading dashes dropped, dashes as
// underscores.
std::string Canonical(absl::string_view key);

class Settings {
 public:
  explicit Settings(std::string origin) : origin_(std::move(origin)) {}

  // A key given twice is an error naming both places, unless both say the same.
  absl::Status Add(Setting setting);
  // Adds every setting of `other` (a DeepSpeed file a command line names).
  absl::Status Merge(const Settings& other);
  const Setting* Find(absl::string_view key) const;
  const std::vector<Setting>& all() const { return settings_; }
  const std::string& origin() const { return origin_; }

  // "<where>: key '<spelled>': <what>".
  absl::Status Error(const Setting& s, absl::string_view what) const;
  // Each sets `out` when the key is present and not null; an error when its value
  // is not of the type.
  absl::Status Int(absl::string_view key, int64_t min, std::optional<int64_t>& out) const;
  absl::Status Double(absl::string_view key, double min, std::optional<double>& out) const;
  absl::Status Bool(absl::string_view key, std::optional<bool>& out) const;
  absl::Status String(absl::string_view key, std::optional<std::string>& out) const;

 private:
  std::string origin_;
  std::vector<Setting> settings_;
};

// The configuration the settings describe (api/loom.h, TrainConfig).
absl::StatusOr<TrainConfig> FromSettings(const Settings& settings);

// The readers of the three forms (config_yaml.cc, config_megatron_args.cc,
// config_deepspeed.cc).
absl::StatusOr<Settings> SettingsFromYaml(const std::string& yaml, const std::string& origin);
absl::StatusOr<Settings> SettingsFromDeepSpeedJson(const std::string& json,
                                                   const std::string& origin);
absl::StatusOr<Settings> SettingsFromMegatronArgs(const std::string& args,
                                                  const std::string& origin);

}  // namespace loom::config

#endif  // LOOM_API_CONFIG_SETTINGS_H_
