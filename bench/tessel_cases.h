#ifndef LOOM_BENCH_TESSEL_CASES_H_
#define LOOM_BENCH_TESSEL_CASES_H_

// The preset placements at 4, 6 and 8 devices (training form, 128 micro-batches)
// with the memory caps Tessel's evaluation scripts use, and what Tessel (zhiqi-0/
// Tessel at 44f72c3, measured on a 2-core machine of this class) reached for them:
// its best makespan re-timed as soon as possible, and its search time.

#include <vector>

namespace loom::bench {

struct TesselCase {
  const char* placement;
  int devices;
  int memory;
  int tessel_makespan;    // -1: Tessel gave no schedule (timed out or not run)
  double tessel_seconds;  // -1: not run; for time-outs, the limit it ran into
  const char* tessel_note;
};

inline const std::vector<TesselCase>& TesselCases() {
  static const std::vector<TesselCase> kCases = {
      {"vshape", 4, 4, 524, 2.9, "default search"},
      {"xshape", 4, 4, 1035, 24.6, "default search"},
      {"mshape", 4, 6, 780, 170.8, "default search"},
      {"nnshape", 4, 6, 1036, 678.4, "default search"},
      {"nnshape_eager", 4, 6, 1036, 451.6, "default search"},
      {"kshape", 4, 6, 773, 4.3, "default search"},
      {"mllm", 4, 20, -1, 900, "fast search timed out"},
      {"finetune", 4, 20, 521, 4.4, "fast search"},
      {"alphafold", 4, 20, 527, 66.4, "fast search"},
      {"vshape", 6, 6, 538, 69.8, "default search"},
      {"xshape", 6, 20, -1, -1, "not run"},
      {"mshape", 6, 20, 805, 377.5, "fast search (default timed out)"},
      {"nnshape", 6, 20, -1, -1, "not run"},
      {"kshape", 6, 20, -1, -1, "not run"},
      {"mllm", 6, 20, -1, -1, "not run"},
      {"finetune", 6, 20, -1, -1, "not run"},
      {"alphafold", 6, 20, -1, -1, "not run"},
      {"vshape", 8, 8, -1, 600, "both searches timed out"},
      {"xshape", 8, 20, -1, 600, "fast search timed out"},
      {"mshape", 8, 20, -1, 600, "both searches timed out"},
      {"nnshape", 8, 20, -1, 600, "both searches timed out"},
      {"kshape", 8, 20, 794, 375.9, "fast search"},
      {"mllm", 8, 20, -1, -1, "not run (expected to time out)"},
      {"finetune", 8, 20, -1, -1, "not run (expected to time out)"},
      {"alphafold", 8, 20, -1, -1, "not run (expected to time out)"},
  };
  return kCases;
}

}  // namespace loom::bench

#endif  // LOOM_BENCH_TESSEL_CASES_H_
