// The proof cache: a cold run fills it, a warm run takes every law from it, and
// lines that do not parse are skipped rather than trusted or fatal.

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ProofCacheTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/proof_cache_",
                        ::testing::UnitTest::GetInstance()->random_seed(), "_", GetParam());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  VerifyOptions Options() const {
    VerifyOptions options;
    options.threads = GetParam();
    options.cache_dir = dir_;
    return options;
  }
  std::string dir_;
};

TEST_P(ProofCacheTest, WarmRunTakesEveryLawFromTheCache) {
  ir::Graph spec = TinyStep("gpt2", 1, /*layers=*/1);
  auto plan = transform::Parallelize(spec, Make(2, 2, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const VerifyOptions options = Options();
  auto cold = Verify(spec, *plan, options);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->verdict, Verdict::kEquivalent);
  EXPECT_EQ(cold->cache_hits, 0);
  ASSERT_GT(cold->laws_proved, 0);
  // One line per proof.
  const std::string file = absl::StrCat(dir_, "/proved-laws");
  const std::string text = Read(file);
  int64_t lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "proved v")) << line;
    ++lines;
  }
  EXPECT_EQ(lines, cold->laws_proved);

  // Lines a cut-short or foreign write left behind are skipped, wherever they are.
  const std::string junk = "garbage\nproved bad\\q escape\nproved v1|linear|cut sh\n";
  {
    std::ofstream out(file, std::ios::trunc | std::ios::binary);
    out << junk << text << junk;
  }
  auto warm = Verify(spec, *plan, options);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->verdict, Verdict::kEquivalent);
  EXPECT_EQ(warm->cache_hits, cold->laws_proved);
  EXPECT_EQ(warm->laws_proved, cold->laws_proved);
  for (const LawResult& r : warm->laws) EXPECT_TRUE(r.cached) << r.key;
  // Nothing new to write: the file is as the test left it.
  EXPECT_EQ(Read(file).size(), text.size() + 2 * junk.size());
}

// A cache the process cannot write costs only the proofs of the next run.
TEST_P(ProofCacheTest, UnwritableCacheIsNotAnError) {
  ir::Graph spec = TinyStep("gpt2", 1, /*layers=*/1);
  auto plan = transform::Parallelize(spec, Make(1, 2, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  {
    std::ofstream blocker(dir_);  // a file where the directory should be
  }
  const VerifyOptions options = Options();
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kEquivalent);
  EXPECT_EQ(r->cache_hits, 0);
}

// A cache file that is a FIFO or a link to a device is a cache with nothing in
// it: the run neither blocks on it nor reads it without end, and proves the plan.
TEST_P(ProofCacheTest, ACacheThatIsNotARegularFileIsLeftAlone) {
  ir::Graph spec = TinyStep("gpt2", 1, /*layers=*/1);
  auto plan = transform::Parallelize(spec, Make(2, 2, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::filesystem::create_directories(dir_);
  const std::string file = absl::StrCat(dir_, "/proved-laws");
  for (int kind = 0; kind < 2; ++kind) {
    std::filesystem::remove(file);
    if (kind == 0) {
      ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
    } else {
      std::filesystem::create_symlink("/dev/urandom", file);
    }
    auto r = Verify(spec, *plan, Options());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->verdict, Verdict::kEquivalent);
    EXPECT_EQ(r->cache_hits, 0);
  }
}

// Asking for more threads than there are cores runs on the cores.
TEST(ProofThreadsTest, ThreadsPastTheCoresAreClamped) {
  ir::Graph spec = TinyStep("gpt2", 1, /*layers=*/1);
  auto plan = transform::Parallelize(spec, Make(1, 2, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  VerifyOptions options;
  options.threads = 100000;
  auto r = Verify(spec, *plan, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->verdict, Verdict::kEquivalent);
}

INSTANTIATE_TEST_SUITE_P(Threads, ProofCacheTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace loom::verify
