#ifndef LOOM_SMT_MODULO_SCHEDULE_H_
#define LOOM_SMT_MODULO_SCHEDULE_H_

// One micro-batch's block offsets for a repetend at a given period, found by Z3
// when the scheduler's own search could not decide the period: block b of
// micro-batch m starts at offset[b] + m * period. Each block starts after each
// predecessor's end plus the lag; on every device the columns the blocks occupy
// modulo the period are disjoint (so instances of all micro-batches never
// overlap). Memory is not modelled: the scheduler asks only for models without
// memory caps.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::smt {

struct ModuloJob {
  int64_t span = 1;
  std::vector<int> devices;
  std::vector<std::pair<int, int64_t>> preds;  // (job, lag)
};

// Offsets are sought below `horizon`. A placement that exists has one whose
// offsets all lie below the spans and lags summed plus the period times the number
// of jobs (shifting each job, in dependency order, down by whole periods while its
// predecessors allow keeps its columns and every dependency), which is the default;
// a smaller horizon can make "none" wrong.
struct ModuloProblem {
  int num_devices = 0;
  std::vector<ModuloJob> jobs;
  int64_t period = 1;
  int64_t horizon = 0;  // 0: the safe default above
};

struct ModuloLimits {
  uint64_t resource_limit = 0;  // Z3's rlimit (deterministic); 0: none
  unsigned timeout_ms = 0;      // wall clock; 0: none
};

// Offsets (any valid ones; the latency is not minimised); nullopt when Z3
// proved that none exist or did not decide within the limits (`proved_none` tells
// which, when given).
absl::StatusOr<std::optional<std::vector<int64_t>>> FindModuloOffsets(
    const ModuloProblem& problem, const ModuloLimits& limits, bool* proved_none = nullptr);

}  // namespace loom::smt

#endif  // LOOM_SMT_MODULO_SCHEDULE_H_
