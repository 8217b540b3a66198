// libFuzzer's entry point for one target, chosen at build time
// (-DLOOM_FUZZ_TARGET=GraphText; fuzz/CMakeLists.txt builds one binary per target).

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return loom::fuzz::LOOM_FUZZ_TARGET(data, size);
}
