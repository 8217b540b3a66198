#ifndef LOOM_TOOLS_CLI_H_
#define LOOM_TOOLS_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace loom::tools {

// Exit codes of the `loom` command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // internal error
inline constexpr int kExitBadInput = 2;  // bad flags, unknown model, malformed file

// Runs `loom <args...>` (args exclude the program name), writing results to `out`
// and one-line errors ("loom show: error: ...") to `err`. Never throws.
int RunLoom(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_CLI_H_
