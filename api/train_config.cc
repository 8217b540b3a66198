// Megatron-style YAML training configurations (api/loom.h, docs/python.md).

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <vector>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "api/loom.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom {
namespace {

// Levenshtein distance, for suggesting the key a typo meant.
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The keys of one configuration: the top level merged with a `model:` map.
class Keys {
 public:
  Keys(const YAML::Node& root, std::string origin) : origin_(std::move(origin)) {
    maps_.push_back(root);
    const YAML::Node model = root["model"];
    if (model && model.IsMap()) maps_.push_back(model);
  }

  YAML::Node Find(const char* key) const {
    for (const YAML::Node& m : maps_) {
      const YAML::Node n = m[key];
      if (n) return n;
    }
    return YAML::Node();
  }

  absl::Status Error(const YAML::Node& n, const char* key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ":", n.Mark().line + 1, ":",
                                                   n.Mark().column + 1, ": key '", key, "': ",
                                                   what));
  }

  // Sets `out` when the key is present; an error when it is not an integer >= min.
  absl::Status Int(const char* key, int64_t min, std::optional<int64_t>& out) const {
    const YAML::Node n = Find(key);
    if (!n || n.IsNull()) return absl::OkStatus();
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
      return Error(n, key, "expected an integer");
    }
    if (v < min) return Error(n, key, absl::StrCat("must be at least ", min, ", got ", v));
    out = v;
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, std::optional<bool>& out) const {
    const YAML::Node n = Find(key);
    if (!n || n.IsNull()) return absl::OkStatus();
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      return Error(n, key, "expected true or false");
    }
    out = v;
    return absl::OkStatus();
  }

  absl::Status String(const char* key, std::optional<std::string>& out) const {
    const YAML::Node n = Find(key);
    if (!n || n.IsNull() || n.IsMap()) return absl::OkStatus();
    if (!n.IsScalar()) return Error(n, key, "expected a string");
    out = n.Scalar();
    return absl::OkStatus();
  }

  const std::string& origin() const { return origin_; }

  // Every key of the top level and of `model:` read once: a key given twice is an
  // error; a key Loom does not read that is one edit or two away from one it does
  // is a typo, refused with the key meant; a parallel setting Loom does not model,
  // set to anything but 1, is refused by name. Other keys (learning rates, data
  // paths: a real configuration's many settings that do not shape the plan) are
  // left alone.
  absl::Status CheckKeys() const {
    static constexpr const char* kRead[] = {
        "loom_model", "model", "name", "tiny", "tensor_model_parallel_size",
        "pipeline_model_parallel_size", "data_parallel_size", "world_size",
        "expert_model_parallel_size", "virtual_pipeline_model_parallel_size",
        "num_layers_per_virtual_pipeline_stage", "num_layers", "seq_length", "micro_batch_size",
        "global_batch_size", "zero_stage", "sequence_parallel", "use_distributed_optimizer",
        "recompute_activations", "recompute_granularity", "trainer", "bf16", "fp16", "fp8"};
    static constexpr const char* kNotModelled[] = {
        "context_parallel_size", "expert_tensor_parallel_size",
        "encoder_tensor_model_parallel_size", "encoder_pipeline_model_parallel_size"};
    for (const YAML::Node& m : maps_) {
      std::map<std::string, int> first_line;
      for (auto it = m.begin(); it != m.end(); ++it) {
        const std::string key = it->first.Scalar();
        const int line = it->first.Mark().line + 1;
        if (auto [at, fresh] = first_line.emplace(key, line); !fresh) {
          return Error(it->first, key.c_str(),
                       absl::StrCat("given twice (first at line ", at->second, ")"));
        }
        if (std::find_if(std::begin(kRead), std::end(kRead),
                         [&](const char* k) { return key == k; }) != std::end(kRead)) {
          continue;
        }
        if (std::find_if(std::begin(kNotModelled), std::end(kNotModelled),
                         [&](const char* k) { return key == k; }) != std::end(kNotModelled)) {
          const YAML::Node v = it->second;  // a copy: it->second lives in a temporary
          if (v.IsNull() || (v.IsScalar() && v.Scalar() == "1")) continue;
          return Error(it->first, key.c_str(),
                       "Loom does not model this parallelism; remove the key or set it to 1");
        }
        for (const char* known : kRead) {
          if (EditDistance(key, known) <= 2) {
            return Error(it->first, key.c_str(),
                         absl::StrCat("unknown key (did you mean '", known, "'?)"));
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string origin_;
  std::vector<YAML::Node> maps_;
};

#define LOOM_CONFIG_OK(expr)                  \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (false)

// The step's precision: Megatron-LM's `bf16` / `fp16` switches, or NeMo's
// `trainer.precision`. What Loom does not build (fp16 with its loss scaling, fp8,
// bf16 without master weights) is refused, never read as another precision; so
// are two settings that disagree.
absl::StatusOr<ir::Precision> PrecisionOf(const Keys& keys) {
  std::optional<bool> bf16, fp16;
  LOOM_CONFIG_OK(keys.Bool("bf16", bf16));
  LOOM_CONFIG_OK(keys.Bool("fp16", fp16));
  if (fp16.value_or(false)) {
    return keys.Error(keys.Find("fp16"), "fp16",
                      "fp16 training (with loss scaling) is not supported; use bf16: true");
  }
  if (const YAML::Node fp8 = keys.Find("fp8"); fp8 && !fp8.IsNull()) {
    bool on = true;
    if (!fp8.IsScalar() || !YAML::convert<bool>::decode(fp8, on) || on) {
      return keys.Error(fp8, "fp8", "fp8 training is not supported; remove the key");
    }
  }
  std::optional<ir::Precision> from_switch;
  if (bf16.has_value()) from_switch = *bf16 ? ir::Precision::kBf16 : ir::Precision::kFp32;
  const YAML::Node trainer = keys.Find("trainer");
  if (!trainer || !trainer.IsMap() || !trainer["precision"] || trainer["precision"].IsNull()) {
    return from_switch.value_or(ir::Precision::kFp32);
  }
  const YAML::Node n = trainer["precision"];
  const std::string value = n.IsScalar() ? n.Scalar() : "";
  ir::Precision from_trainer;
  if (value == "bf16" || value == "bf16-mixed") {
    from_trainer = ir::Precision::kBf16;
  } else if (value == "32" || value == "32-true") {
    from_trainer = ir::Precision::kFp32;
  } else if (value == "16" || value == "16-mixed" || value == "16-true") {
    return keys.Error(n, "trainer.precision",
                      "fp16 training (with loss scaling) is not supported; use bf16-mixed");
  } else {
    return keys.Error(n, "trainer.precision",
                      absl::StrCat("'", value, "' is not supported; expected bf16-mixed "
                                   "(bf16, with f32 master weights) or 32"));
  }
  if (from_switch.has_value() && *from_switch != from_trainer) {
    return keys.Error(n, "trainer.precision",
                      absl::StrCat("'", value, "' conflicts with bf16: ", *bf16 ? "true" : "false"));
  }
  return from_trainer;
}

absl::StatusOr<TrainConfig> FromKeys(const Keys& keys) {
  LOOM_CONFIG_OK(keys.CheckKeys());
  TrainConfig c;
  std::optional<std::string> name, model, granularity;
  LOOM_CONFIG_OK(keys.String("loom_model", name));
  LOOM_CONFIG_OK(keys.String("model", model));
  if (!name.has_value()) name = model;
  if (!name.has_value()) LOOM_CONFIG_OK(keys.String("name", name));
  if (name.has_value()) c.model.name = *name;
  std::optional<bool> tiny, sp, distributed, recompute_activations;
  LOOM_CONFIG_OK(keys.Bool("tiny", tiny));
  c.model.tiny = tiny.value_or(false);
  LOOM_ASSIGN_OR_RETURN(c.model.precision, PrecisionOf(keys));
  std::optional<int64_t> tp, pp, dp, world, ep, vpp, layers_per_virtual, layers, seq, micro,
      global, zero;
  LOOM_CONFIG_OK(keys.Int("tensor_model_parallel_size", 1, tp));
  LOOM_CONFIG_OK(keys.Int("pipeline_model_parallel_size", 1, pp));
  LOOM_CONFIG_OK(keys.Int("data_parallel_size", 1, dp));
  LOOM_CONFIG_OK(keys.Int("world_size", 1, world));
  LOOM_CONFIG_OK(keys.Int("expert_model_parallel_size", 1, ep));
  LOOM_CONFIG_OK(keys.Int("virtual_pipeline_model_parallel_size", 1, vpp));
  LOOM_CONFIG_OK(keys.Int("num_layers_per_virtual_pipeline_stage", 1, layers_per_virtual));
  LOOM_CONFIG_OK(keys.Int("num_layers", 1, layers));
  LOOM_CONFIG_OK(keys.Int("seq_length", 1, seq));
  LOOM_CONFIG_OK(keys.Int("micro_batch_size", 1, micro));
  LOOM_CONFIG_OK(keys.Int("global_batch_size", 1, global));
  LOOM_CONFIG_OK(keys.Int("zero_stage", 0, zero));
  LOOM_CONFIG_OK(keys.Bool("sequence_parallel", sp));
  LOOM_CONFIG_OK(keys.Bool("use_distributed_optimizer", distributed));
  LOOM_CONFIG_OK(keys.Bool("recompute_activations", recompute_activations));
  LOOM_CONFIG_OK(keys.String("recompute_granularity", granularity));

  // NeMo: the job's size is trainer.devices x trainer.num_nodes.
  const YAML::Node trainer = keys.Find("trainer");
  if (trainer && trainer.IsMap() && trainer["devices"]) {
    int64_t devices = 0, nodes = 1;
    const YAML::Node d = trainer["devices"], n = trainer["num_nodes"];
    if (!d.IsScalar() || !YAML::convert<int64_t>::decode(d, devices) || devices < 1) {
      return keys.Error(d, "trainer.devices", "expected an integer >= 1");
    }
    if (n && (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, nodes) || nodes < 1)) {
      return keys.Error(n, "trainer.num_nodes", "expected an integer >= 1");
    }
    if (world.has_value() && *world != devices * nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": world_size ", *world, " differs from trainer.devices x "
          "trainer.num_nodes (", devices, " x ", nodes, ")"));
    }
    world = devices * nodes;
  }

  ParallelConfig& p = c.parallel;
  p.tp = static_cast<int>(tp.value_or(1));
  p.pp = static_cast<int>(pp.value_or(1));
  p.ep = static_cast<int>(ep.value_or(1));
  p.sp = sp.value_or(false);
  if (dp.has_value()) {
    p.dp = static_cast<int>(*dp);
    if (world.has_value() && *dp * p.tp * p.pp != *world) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": data x tensor x pipeline parallel size (", *dp, " x ", p.tp, " x ",
          p.pp, ") is not the job's ", *world, " devices"));
    }
  } else if (world.has_value()) {
    if (*world % (p.tp * p.pp) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": world_size ", *world, " is not a multiple of tensor x pipeline "
          "parallel size ", p.tp * p.pp));
    }
    p.dp = static_cast<int>(*world / (p.tp * p.pp));
  }
  if (layers.has_value()) {
    if (*layers > ir::kMaxLayers) {
      return absl::InvalidArgumentError(absl::StrCat(keys.origin(), ": num_layers ", *layers,
                                                     " is above ", ir::kMaxLayers));
    }
    c.model.layers = static_cast<int>(*layers);
  }
  if (seq.has_value()) c.model.seq = *seq;
  if (vpp.has_value()) {
    p.vpp = static_cast<int>(*vpp);
  } else if (layers_per_virtual.has_value()) {
    if (!layers.has_value() || *layers % (p.pp * *layers_per_virtual) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": num_layers_per_virtual_pipeline_stage needs num_layers, a multiple "
          "of it times pipeline_model_parallel_size"));
    }
    p.vpp = static_cast<int>(*layers / (p.pp * *layers_per_virtual));
  }
  // Batches: micro_batch_size sequences per data-parallel rank and micro-batch;
  // global_batch_size over the whole step.
  const int64_t per_micro = micro.value_or(1);
  c.model.batch = per_micro * p.dp;
  if (global.has_value()) {
    if (*global % (per_micro * p.dp) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": global_batch_size ", *global, " is not a multiple of "
          "micro_batch_size x data-parallel size (", per_micro, " x ", p.dp, ")"));
    }
    const int64_t microbatches = *global / (per_micro * p.dp);
    if (microbatches > ir::kMaxMicrobatches) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": global_batch_size ", *global, " makes ", microbatches,
          " micro-batches of micro_batch_size x data-parallel size (", per_micro, " x ", p.dp,
          "), above ", ir::kMaxMicrobatches));
    }
    p.microbatches = static_cast<int>(microbatches);
  }
  // Megatron's distributed optimizer shards the optimizer states over the dp group.
  p.zero = static_cast<int>(zero.value_or(distributed.value_or(false) ? 1 : 0));
  if (p.zero > 3) return absl::InvalidArgumentError(absl::StrCat(keys.origin(), ": zero_stage ", p.zero, " is above 3"));
  if (granularity.has_value()) {
    if (*granularity == "full") {
      p.recompute = true;
    } else if (*granularity == "selective") {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": recompute_granularity 'selective' (the attention core only) is not "
          "modelled; Loom recomputes whole layers ('full')"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.origin(), ": recompute_granularity '", *granularity, "': expected full"));
    }
  } else if (recompute_activations.value_or(false)) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.origin(), ": recompute_activations (selective recomputation) is not modelled; set "
        "recompute_granularity: full"));
  }
  return c;
}

}  // namespace

absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& yaml, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": a training configuration is a map of keys"));
  }
  try {
    return FromKeys(Keys(root, origin));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  // A training configuration is a few hundred lines.
  constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;
  LOOM_ASSIGN_OR_RETURN(const std::string text, ir::ReadTextFile(path, kMaxConfigBytes));
  return ParseTrainConfig(text, path);
}

}  // namespace loom
