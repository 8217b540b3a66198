#ifndef LOOM_FUZZ_FUZZ_TARGETS_H_
#define LOOM_FUZZ_FUZZ_TARGETS_H_

// One fuzz target per reader of untrusted input: each takes the bytes of a file as
// the reader would read them, and checks what a reader promises. It returns 0 for
// an input read or refused with an error; a crash, a hang, an exception or a broken
// promise (an accepted input that does not write back to the same thing) aborts.
// tools/fuzz.sh runs them under libFuzzer; the replay test runs every file of their
// seed corpora (fuzz/corpus/<name>/) in the main test suite.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

struct Target {
  const char* name;  // also the folder of its corpus
  TargetFn fn;
};

int GraphText(const uint8_t* data, size_t size);     // ir::ParseGraph
int GraphJson(const uint8_t* data, size_t size);     // ir::GraphFromJson
int PlanJson(const uint8_t* data, size_t size);      // ir::PlanFromJson
int TrainConfig(const uint8_t* data, size_t size);   // ParseTrainConfig (YAML)
int BlockModel(const uint8_t* data, size_t size);    // schedule::BlockModelFromJson
int ScheduleJson(const uint8_t* data, size_t size);  // schedule::ScheduleFromJson
int TorchCsv(const uint8_t* data, size_t size);      // schedule::ScheduleFromTorchCsv
int ProofCache(const uint8_t* data, size_t size);    // verify::ProofCache::Parse

const std::vector<Target>& AllTargets();

}  // namespace loom::fuzz

#endif  // LOOM_FUZZ_FUZZ_TARGETS_H_
