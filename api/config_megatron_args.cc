// Megatron-LM command lines (api/loom.h, ParseMegatronArgs): the arguments as
// settings (api/config_settings.h), the launcher's sizes as the job's devices.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/config_settings.h"
#include "api/loom.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom {
namespace config {
namespace {

// Words as a shell splits them: blanks separate, quotes group, a backslash before
// a newline continues the line; a line whose first word starts with # is a comment.
absl::StatusOr<std::vector<std::string>> ShellWords(const std::string& text,
                                                    const std::string& origin) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, at_line_start = true;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      ++i;
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      continue;
    }
    if (c == '#' && !in_word && at_line_start) {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      if (c == '\n') at_line_start = true;
      continue;
    }
    at_line_start = false;
    in_word = true;
    if (c == '\'' || c == '"') {
      quote = c;
    } else {
      word += c;
    }
  }
  if (quote != 0) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": unterminated ", std::string(1, quote),
                                                   " quote"));
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

bool IsName(const std::string& word) { return absl::StartsWith(word, "--") && word.size() > 2; }

// `--name value`, `--name=value`, `--switch`, `--name v1 v2` (a list) from
// words[begin, end), each setting's place its argument's position.
absl::Status AddArguments(const std::vector<std::string>& words, size_t begin, size_t end,
                          Settings& out, std::string* deepspeed_config) {
  for (size_t i = begin; i < end;) {
    std::string name = words[i];
    if (!IsName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          out.origin(), ": argument ", i + 1, ": expected an option (--name), got '", name, "'"));
    }
    Setting s;
    s.where = absl::StrCat(out.origin(), ": argument ", i + 1);
    std::vector<std::string> values;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      values.push_back(name.substr(eq + 1));
      name = name.substr(0, eq);
    }
    ++i;
    while (i < end && !IsName(words[i])) values.push_back(words[i++]);
    s.spelled = name;
    s.key = Canonical(name);
    if (values.empty()) {
      s.value = "true";
    } else if (values.size() == 1) {
      s.value = values[0];
    } else {
      s.scalar = false;
      s.value = absl::StrJoin(values, " ");
    }
    if (s.key == "deepspeed_config" && deepspeed_config != nullptr) *deepspeed_config = s.value;
    LOOM_RETURN_IF_ERROR(out.Add(std::move(s)));
  }
  return absl::OkStatus();
}

// The launcher's words before the script (torchrun, python -m torch.distributed.run,
// deepspeed): --nproc_per_node x --nnodes devices, as world_size.
absl::Status AddLauncher(const std::vector<std::string>& words, size_t script, Settings& out) {
  int64_t per_node = 0, nodes = 1;
  for (size_t i = 0; i + 1 < script; ++i) {
    const std::string key = Canonical(words[i]);
    if (key != "nproc_per_node" && key != "nnodes" && key != "num_gpus" && key != "num_nodes") {
      continue;
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(words[i + 1], &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          out.origin(), ": argument ", i + 2, ": the launcher's ", words[i],
          " expects a number of ", key == "nnodes" || key == "num_nodes" ? "nodes" : "processes",
          ", got '", words[i + 1], "'", absl::StrContains(words[i + 1], ":") ?
          " (an elastic range: give the job's size)" : ""));
    }
    (key == "nnodes" || key == "num_nodes" ? nodes : per_node) = v;
  }
  if (per_node == 0) return absl::OkStatus();
  return out.Add(Setting{.key = "world_size",
                         .spelled = "--nproc_per_node x --nnodes",
                         .value = absl::StrCat(per_node * nodes),
                         .where = absl::StrCat(out.origin(), ": the launcher")});
}

}  // namespace

absl::StatusOr<Settings> SettingsFromMegatronArgs(const std::string& args,
                                                  const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> words, ShellWords(args, origin));
  Settings settings(origin);
  size_t begin = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    if (absl::EndsWith(words[i], ".py")) {
      LOOM_RETURN_IF_ERROR(AddLauncher(words, i, settings));
      begin = i + 1;
      break;
    }
  }
  std::string deepspeed_config;
  LOOM_RETURN_IF_ERROR(AddArguments(words, begin, words.size(), settings, &deepspeed_config));
  if (!deepspeed_config.empty()) {
    LOOM_ASSIGN_OR_RETURN(const std::string json,
                          ir::ReadTextFile(deepspeed_config, int64_t{16} << 20));
    LOOM_ASSIGN_OR_RETURN(Settings ds, SettingsFromDeepSpeedJson(json, deepspeed_config));
    LOOM_RETURN_IF_ERROR(settings.Merge(ds));
  }
  return settings;
}

}  // namespace config

absl::StatusOr<TrainConfig> ParseMegatronArgs(const std::string& args, const std::string& origin) {
  LOOM_ASSIGN_OR_RETURN(config::Settings settings, config::SettingsFromMegatronArgs(args, origin));
  return config::FromSettings(settings);
}

absl::StatusOr<TrainConfig> LoadMegatronArgs(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const std::string text, ir::ReadTextFile(path, int64_t{16} << 20));
  return ParseMegatronArgs(text, path);
}

}  // namespace loom
