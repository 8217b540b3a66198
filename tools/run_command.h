#ifndef LOOM_TOOLS_RUN_COMMAND_H_
#define LOOM_TOOLS_RUN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace loom::tools {

// `loom run`: runs a plan file's training steps on a backend, prints loss and
// time per step, and with --check the largest relative differences from the
// single-device reference. Exit 0 success, 1 the run stopped on the plan or the
// check is outside tolerance, 2 bad input.
int CmdRun(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_RUN_COMMAND_H_
