#ifndef LOOM_TOOLS_VERIFY_COMMAND_H_
#define LOOM_TOOLS_VERIFY_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace loom::tools {

// `loom verify`: proves a plan file equivalent to the training step the model flags
// describe, prints the verdict with every failure, and writes the JSON report and
// JUnit file the flags ask for. Exit 0 proved equivalent, 1 not equivalent, 2
// undecided or bad input (flags, files, a plan that does not fit the model).
int CmdVerify(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The default proof cache: $XDG_CACHE_HOME/loom, else $HOME/.cache/loom; empty when
// neither variable is set (or set to an empty value).
std::string DefaultVerifyCacheDir();

}  // namespace loom::tools

#endif  // LOOM_TOOLS_VERIFY_COMMAND_H_
