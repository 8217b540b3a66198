#ifndef LOOM_TOOLS_SCHEDULE_COMMANDS_H_
#define LOOM_TOOLS_SCHEDULE_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

namespace loom::tools {

// `loom search`: searches a schedule for a block model (a preset placement, a stage
// model, a JSON file or a plan) and prints its period, bounds, makespan, bubble,
// peak memory and search time.
int CmdSearch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `loom simulate`: times and checks a schedule (a schedule file, a torch CSV or a
// predefined schedule), prints its figures and writes a Gantt chart and a trace.
int CmdSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace loom::tools

#endif  // LOOM_TOOLS_SCHEDULE_COMMANDS_H_
