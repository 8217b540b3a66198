#include "tools/terminal_status.h"

#include <unistd.h>

#include <iostream>

#include "absl/strings/str_format.h"

namespace loom::tools {

TerminalStatus::TerminalStatus(absl::string_view command, std::ostream& err, bool quiet)
    : command_(command), shown_(!quiet && &err == &std::cerr && isatty(STDERR_FILENO) == 1) {}

TerminalStatus::~TerminalStatus() { Done(); }

void TerminalStatus::Step(absl::string_view what) {
  if (!shown_) return;
  const auto now = std::chrono::steady_clock::now();
  std::string done;
  if (active_) {
    const double seconds = std::chrono::duration<double>(now - since_).count();
    if (seconds >= 1.0) done = absl::StrFormat(" (%s: %.1f s)", last_, seconds);
  }
  std::cerr << "\r\033[K" << command_ << ": " << what << done << std::flush;
  last_ = std::string(what);
  since_ = now;
  active_ = true;
}

void TerminalStatus::Done() {
  if (!shown_ || !active_) return;
  std::cerr << "\r\033[K" << std::flush;
  active_ = false;
}

}  // namespace loom::tools
