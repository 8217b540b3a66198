// peak_rss PROGRAM [ARG...]: runs the program (its output to /dev/null) and prints
// its peak resident memory in KiB, or exits 1 if it did not exit with 0.
//
// The tests start this small process rather than the program itself: a child
// forked from a large test process starts its peak count from the parent's
// pages, a child forked from here from this one's.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: peak_rss PROGRAM [ARG...]\n");
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) ::_exit(126);
    ::execv(argv[1], argv + 1);
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (pid < 0 || ::wait4(pid, &status, 0, &usage) != pid) return 1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  std::printf("%ld\n", usage.ru_maxrss);
  return 0;
}
