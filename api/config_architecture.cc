// A training configuration's architecture keys against the zoo model it names
// (api/loom.h, CheckArchitecture).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/loom.h"
#include "models/models.h"

namespace loom {
namespace {

// One value, as a configuration writes it and as the model publishes it: numbers
// by value (1e-5 is 0.00001, 500000 is 5e5), switches by truth (a bare switch is
// "true"), names without regard to case (rmsnorm is RMSNorm).
bool SameValue(absl::string_view written, absl::string_view published) {
  double a = 0, b = 0;
  if (absl::SimpleAtod(written, &a) && absl::SimpleAtod(published, &b)) {
    return a == b || std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
  }
  return absl::AsciiStrToLower(written) == absl::AsciiStrToLower(published);
}

}  // namespace

absl::Status CheckArchitecture(TrainConfig& config) {
  if (config.architecture.empty()) return absl::OkStatus();
  if (config.model.name.empty()) {
    const ArchitectureSetting& first = config.architecture.front();
    return absl::InvalidArgumentError(absl::StrCat(
        first.where, ": key '", first.spelled,
        "': the configuration describes its model's architecture, but names no model to "
        "check it against (give the model: --model NAME, or loom_model: NAME)"));
  }
  auto facts = models::PublishedArchitecture(config.model.name);
  if (!facts.ok()) return facts.status();
  for (const ArchitectureSetting& s : config.architecture) {
    const models::ArchitectureFact* fact = nullptr;
    for (const models::ArchitectureFact& f : *facts) {
      if (f.key == s.key) fact = &f;
    }
    if (fact == nullptr) {
      config.ignored.push_back(s.spelled);
      continue;
    }
    if (!SameValue(s.value, fact->value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.where, ": key '", s.spelled, "': ", s.value, " disagrees with ", config.model.name,
          ", whose ", s.key, " is ", fact->value,
          " (Loom plans the zoo model named: name the model this configuration describes, or "
          "leave the key out)"));
    }
    config.read.push_back(s.key);
    config.architecture_agreed.push_back(s.spelled);
  }
  config.architecture.clear();
  return absl::OkStatus();
}

}  // namespace loom
