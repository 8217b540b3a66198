#include "tools/flags.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/name_suggestion.h"

namespace loom::tools {

void FlagSet::AddString(std::string name, std::string value_name, std::string help) {
  flags_.push_back({std::move(name), std::move(value_name), std::move(help)});
}

void FlagSet::AddBool(std::string name, std::string help) {
  flags_.push_back({std::move(name), "", std::move(help)});
}

void FlagSet::AddAlias(std::string alias, std::string name) {
  aliases_[std::move(alias)] = std::move(name);
}

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  std::string key(name);
  auto alias = aliases_.find(key);
  if (alias != aliases_.end()) key = alias->second;
  for (const Flag& f : flags_) {
    if (f.name == key) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (!positional_name_.empty() && positionals_.empty()) {
        positionals_.push_back(arg);
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg;
    std::optional<std::string> value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      std::vector<std::string> names;
      for (const Flag& f : flags_) names.push_back(f.name);
      std::optional<std::string> meant = ir::ClosestName(name, names);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag '", name, "'",
          meant.has_value() ? absl::StrCat(" (did you mean '", *meant, "'?)") : ""));
    }
    if (values_.count(flag->name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag '", flag->name, "' given twice (give each flag once)"));
    }
    if (flag->value_name.empty()) {
      if (value.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag '", flag->name, "' takes no value"));
      }
      values_[flag->name] = "true";
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag '", flag->name, "' needs a value (",
                                                       flag->value_name, ")"));
      }
      value = args[++i];
    }
    values_[flag->name] = *value;
  }
  return absl::OkStatus();
}

bool FlagSet::Has(absl::string_view name) const { return values_.count(std::string(name)) > 0; }

std::optional<std::string> FlagSet::GetString(absl::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<int64_t> FlagSet::GetInt(absl::string_view name, int64_t fallback, int64_t min,
                                        int64_t max) const {
  auto text = GetString(name);
  if (!text.has_value()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat("flag '", name, "' expects an integer in [",
                                                   min, ", ", max, "], got '", *text, "'"));
  }
  return v;
}

absl::StatusOr<double> FlagSet::GetDouble(absl::string_view name, double fallback, double min,
                                          double max) const {
  auto text = GetString(name);
  if (!text.has_value()) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(*text, &v) || !(v >= min && v <= max)) {
    return absl::InvalidArgumentError(absl::StrCat("flag '", name, "' expects a number in [",
                                                   min, ", ", max, "], got '", *text, "'"));
  }
  return v;
}

absl::StatusOr<int64_t> FlagSet::GetBytes(absl::string_view name, int64_t fallback,
                                          int64_t max) const {
  auto text = GetString(name);
  if (!text.has_value()) return fallback;
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag '", name, "' expects bytes in [0, ", max,
        "]: an integer or a number with a unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB), got '",
        *text, "'"));
  };
  absl::string_view v = absl::StripAsciiWhitespace(*text);
  size_t unit_at = v.size();
  while (unit_at > 0 && absl::ascii_isalpha(v[unit_at - 1])) --unit_at;
  const std::string unit = absl::AsciiStrToLower(v.substr(unit_at));
  const absl::string_view number = absl::StripAsciiWhitespace(v.substr(0, unit_at));
  static const std::map<std::string, int64_t>* const kUnits = new std::map<std::string, int64_t>{
      {"", 1},
      {"b", 1},
      {"kib", int64_t{1} << 10},
      {"mib", int64_t{1} << 20},
      {"gib", int64_t{1} << 30},
      {"tib", int64_t{1} << 40},
      {"kb", 1'000},
      {"mb", 1'000'000},
      {"gb", 1'000'000'000},
      {"tb", 1'000'000'000'000}};
  auto it = kUnits->find(unit);
  if (it == kUnits->end() || number.empty()) return bad();
  // Digits, optionally a point and more digits, computed exactly: 2.01GB is
  // 2010000000 bytes, and a fraction of a byte is refused.
  const size_t point = number.find('.');
  const absl::string_view whole = number.substr(0, point);
  const absl::string_view fraction =
      point == absl::string_view::npos ? absl::string_view() : number.substr(point + 1);
  auto digits = [](absl::string_view d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if ((whole.empty() && fraction.empty()) || !digits(whole) || !digits(fraction) ||
      whole.size() > 18 || fraction.size() > 18) {
    return bad();
  }
  using Wide = unsigned __int128;
  Wide int_part = 0, frac_part = 0, scale = 1;
  for (char c : whole) int_part = int_part * 10 + static_cast<unsigned>(c - '0');
  for (char c : fraction) {
    frac_part = frac_part * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  const Wide unit_bytes = static_cast<Wide>(it->second);
  if ((frac_part * unit_bytes) % scale != 0) return bad();
  const Wide bytes = int_part * unit_bytes + frac_part * unit_bytes / scale;
  if (bytes > static_cast<Wide>(max)) return bad();
  return static_cast<int64_t>(bytes);
}

void FlagSet::AddPositional(std::string value_name, std::string help) {
  positional_name_ = std::move(value_name);
  positional_help_ = std::move(help);
}

std::optional<std::string> FlagSet::Positional() const {
  if (positionals_.empty()) return std::nullopt;
  return positionals_.front();
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: loom ", command_, " [flags]",
                                 positional_name_.empty() ? "" : " [" + positional_name_ + "]",
                                 "\n\n", summary_, "\n\n");
  if (!positional_name_.empty()) {
    absl::StrAppend(&out, absl::StrFormat("  %-28s %s\n\n", positional_name_, positional_help_));
  }
  absl::StrAppend(&out, "flags:\n");
  for (const Flag& f : flags_) {
    std::string left = f.name;
    for (const auto& [alias, target] : aliases_) {
      if (target == f.name) left = absl::StrCat(alias, ", ", left);
    }
    if (!f.value_name.empty()) absl::StrAppend(&left, " ", f.value_name);
    absl::StrAppend(&out, absl::StrFormat("  %-28s %s\n", left, f.help));
  }
  absl::StrAppend(&out, absl::StrFormat("  %-28s %s\n", "--help", "show this help"));
  return out;
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kResourceExhausted:  // the input does not fit what is there
      return kExitBadInput;
    default:
      return kExitFailure;
  }
}

int Fail(std::ostream& err, absl::string_view command, const absl::Status& status) {
  err << "loom " << command << ": error: " << status.message() << "\n";
  return ExitCodeFor(status);
}

int ParseOrExit(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      out << flags.Help();
      return kExitOk;
    }
  }
  absl::Status s = flags.Parse(args);
  if (!s.ok()) {
    err << "loom " << flags.command() << ": error: " << s.message() << " (see 'loom "
        << flags.command() << " --help')\n";
    return kExitBadInput;
  }
  return -1;
}

}  // namespace loom::tools
