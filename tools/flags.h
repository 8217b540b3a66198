#ifndef LOOM_TOOLS_FLAGS_H_
#define LOOM_TOOLS_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tools/cli.h"

namespace loom::tools {

// Flags of one subcommand. Accepts `--name value`, `--name=value` and bare
// boolean `--name`; `-o` is an alias declared like any other name.
class FlagSet {
 public:
  FlagSet(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}

  void AddString(std::string name, std::string value_name, std::string help);
  void AddBool(std::string name, std::string help);
  void AddAlias(std::string alias, std::string name);
  // Accepts one argument that is not a flag (a file name), shown in the help.
  void AddPositional(std::string value_name, std::string help);
  std::optional<std::string> Positional() const;

  // Parses `args` (after the subcommand). Errors name the flag:
  // "unknown flag '--foo'", "flag '--layers' needs a value".
  absl::Status Parse(const std::vector<std::string>& args);

  bool Has(absl::string_view name) const;
  // Forgets a parsed flag (as if it had not been given).
  void Erase(absl::string_view name) { values_.erase(std::string(name)); }
  bool GetBool(absl::string_view name) const { return Has(name); }
  std::optional<std::string> GetString(absl::string_view name) const;
  // A present flag must hold an integer within [min, max]; absent gives `fallback`.
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t fallback, int64_t min,
                                 int64_t max) const;
  absl::StatusOr<double> GetDouble(absl::string_view name, double fallback, double min,
                                   double max) const;
  // A present flag must hold a byte count in [0, max]: an integer, or a number with
  // a unit, binary (KiB, MiB, GiB, TiB) or decimal (B, kB, MB, GB, TB), any case,
  // that comes to a whole number of bytes: "85899345920", "80GiB", "1.5 TB".
  absl::StatusOr<int64_t> GetBytes(absl::string_view name, int64_t fallback, int64_t max) const;

  std::string Help() const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
  };
  const Flag* Find(absl::string_view name) const;

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> values_;
  std::string positional_name_;
  std::string positional_help_;
  std::vector<std::string> positionals_;
};

// Exit code for a failed status: bad input (kExitBadInput) or internal failure.
int ExitCodeFor(const absl::Status& status);
// Writes "loom <command>: error: <message>" and returns ExitCodeFor(status).
int Fail(std::ostream& err, absl::string_view command, const absl::Status& status);
// Parses flags, printing the help for --help. Returns -1 to go on, else an exit code.
int ParseOrExit(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_FLAGS_H_
