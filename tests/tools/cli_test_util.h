#ifndef LOOM_TESTS_TOOLS_CLI_TEST_UTIL_H_
#define LOOM_TESTS_TOOLS_CLI_TEST_UTIL_H_

// Helpers shared by the command-line tests: run `loom` in-process and capture it.

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/cli.h"

namespace loom::tools::testing {

struct Result {
  int code;
  std::string out;
  std::string err;
};

inline Result RunCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = RunLoom(args, out, err);
  return {code, out.str(), err.str()};
}

// Lines in an output (error output must be exactly one).
inline int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Writes `content` to a file in the test's temporary directory; returns its path.
inline std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << content;
  return path;
}

// Runs a shell command; returns what it wrote to stdout, its exit code in `code`
// (-1 when it did not exit normally).
inline std::string RunShell(const std::string& command, int& code) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) {
    code = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace loom::tools::testing

#endif  // LOOM_TESTS_TOOLS_CLI_TEST_UTIL_H_
