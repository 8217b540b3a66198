#ifndef LOOM_TOOLS_TERMINAL_STATUS_H_
#define LOOM_TOOLS_TERMINAL_STATUS_H_

// A one-line status on standard error while a command's steps run, so that a step
// of seconds (building a 671B model's step, splitting it over 8,192 devices, writing
// a 500 MB plan) is never a silent terminal. Shown only when standard error is a
// terminal: output captured by CI or a pipe is unchanged.

#include <chrono>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace loom::tools {

class TerminalStatus {
 public:
  // `command` prefixes every line ("plan: building the step of llama3-405b"). Shown
  // when `err` is the process's standard error, a terminal, and not `quiet`.
  TerminalStatus(absl::string_view command, std::ostream& err, bool quiet = false);
  ~TerminalStatus();
  TerminalStatus(const TerminalStatus&) = delete;
  TerminalStatus& operator=(const TerminalStatus&) = delete;

  // Replaces the line with what runs now; the step before it shows how long it took
  // when that was a second or more.
  void Step(absl::string_view what);
  // Clears the line (before the command prints its result).
  void Done();

  bool shown() const { return shown_; }

 private:
  std::string command_;
  bool shown_ = false;
  bool active_ = false;
  std::string last_;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace loom::tools

#endif  // LOOM_TOOLS_TERMINAL_STATUS_H_
