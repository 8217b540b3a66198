// Every file of every fuzz target's corpus (fuzz/corpus/<target>/: the seeds, and the
// reproducers of what fuzzing found) is read by its target without a crash: the
// fuzzers' findings stay fixed in the main test suite.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz/fuzz_targets.h"
#include "gtest/gtest.h"

namespace loom::fuzz {
namespace {

TEST(FuzzCorpusTest, EveryTargetReadsItsCorpus) {
  for (const Target& target : AllTargets()) {
    const std::filesystem::path dir =
        std::filesystem::path(LOOM_FUZZ_CORPUS_DIR) / target.name;
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      SCOPED_TRACE(entry.path().string());
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_EQ(target.fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++files;
    }
    EXPECT_GE(files, 2) << target.name << ": a corpus of at least two seeds";
  }
}

}  // namespace
}  // namespace loom::fuzz
