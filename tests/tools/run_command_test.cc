// `loom run`: steps, the reference check, exit codes and errors.

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

// A scheduled plan of tiny llama3 over dp2 tp2 pp2: plan, then search.
std::string ScheduledPlan() {
  const std::string plan = ::testing::TempDir() + "run_plan.json";
  const std::string ordered = ::testing::TempDir() + "run_plan_ordered.json";
  Result p = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--layers", "2", "--dp", "2",
                     "--tp", "2", "--pp", "2", "--microbatches", "4", "-o", plan});
  EXPECT_EQ(p.code, kExitOk) << p.err;
  Result s = RunCli({"search", "--plan", plan, "--model", "llama3-8b", "--tiny", "--layers", "2",
                     "-o", ordered});
  EXPECT_EQ(s.code, kExitOk) << s.err;
  return ordered;
}

// Three steps in the searched order agree with the reference: exit 0, a loss per
// step and the check's figures.
TEST(RunCommandTest, ChecksThreeStepsOfAScheduledPlan) {
  const std::string plan = ScheduledPlan();
  Result r = RunCli({"run", plan, "--model", "llama3-8b", "--tiny", "--layers", "2", "--steps",
                     "3", "--check"});
  ASSERT_EQ(r.code, kExitOk) << r.err << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "(the plan's order)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "step 3 ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "within tolerance 1e-05")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "peak memory:")) << r.out;
}

// fp64 is held to 1e-10; a tolerance of 0 cannot be met in fp32: exit 1.
TEST(RunCommandTest, ToleranceDecidesTheExitCode) {
  const std::string plan = ScheduledPlan();
  const std::vector<std::string> base = {"run", plan, "--model", "llama3-8b", "--tiny",
                                         "--layers", "2", "--steps", "2", "--check"};
  std::vector<std::string> fp64 = base;
  fp64.insert(fp64.end(), {"--precision", "fp64"});
  Result a = RunCli(fp64);
  EXPECT_EQ(a.code, kExitOk) << a.err << a.out;
  EXPECT_TRUE(absl::StrContains(a.out, "within tolerance 1e-10")) << a.out;
  std::vector<std::string> strict = base;
  strict.insert(strict.end(), {"--tolerance", "0"});
  Result b = RunCli(strict);
  EXPECT_EQ(b.code, kExitFailure) << b.err << b.out;
  EXPECT_TRUE(absl::StrContains(b.out, "OUTSIDE tolerance")) << b.out;
}

// Bad input is one error line and exit 2: a missing file, a bad precision, a
// backend this build or machine lacks, a token file of odd size.
TEST(RunCommandTest, BadInputIsExit2) {
  const std::string plan = ScheduledPlan();
  const std::string odd = WriteTemp("odd_tokens.bin", "abc");
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"run", "/nonexistent/plan.json", "--model", "llama3-8b", "--tiny"},
           {"run", plan, "--model", "llama3-8b", "--tiny", "--layers", "2", "--precision", "fp16"},
           {"run", plan, "--model", "llama3-8b", "--tiny", "--layers", "2", "--backend", "tpu"},
           {"run", plan, "--model", "llama3-8b", "--tiny", "--layers", "2", "--data", odd},
           {"run", plan, "--layers", "3"},
       }) {
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << args.back() << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
  }
}

// Token ids from a file drive the data: a different stream gives different losses.
// A full-size plan is refused before it allocates, saying what it needs and what
// it may use (exit 2), instead of dying of an allocation failure; --memory sets
// what it may use.
TEST(RunCommandTest, RefusesAPlanThatDoesNotFitBeforeItStarts) {
  const std::string full = ::testing::TempDir() + "run_full.json";
  ASSERT_EQ(RunCli({"plan", "--model", "llama3-8b", "--tp", "2", "--pp", "2", "-o", full}).code,
            kExitOk);
  Result r = RunCli({"run", full, "--memory", "64GiB"});
  EXPECT_EQ(r.code, kExitBadInput) << r.out << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "the run needs at least ")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "more than the 64.0 GiB it may use (--memory)")) << r.err;
  // The tiny plan fits its own small allowance.
  Result tiny = RunCli({"run", ScheduledPlan(), "--memory", "1GiB"});
  EXPECT_EQ(tiny.code, kExitOk) << tiny.err;
  Result small = RunCli({"run", ScheduledPlan(), "--memory", "16KiB"});
  EXPECT_EQ(small.code, kExitBadInput) << small.err;
}

TEST(RunCommandTest, ReadsTokenIdsFromAFile) {
  const std::string plan = ScheduledPlan();
  std::string bytes;
  for (int i = 0; i < 64; ++i) {
    const int32_t id = (i * 7) % 50;
    bytes.append(reinterpret_cast<const char*>(&id), 4);
  }
  const std::string tokens = ::testing::TempDir() + "tokens.bin";
  std::ofstream(tokens, std::ios::binary) << bytes;
  const std::vector<std::string> base = {"run", plan, "--model", "llama3-8b", "--tiny",
                                         "--layers", "2"};
  std::vector<std::string> with_file = base;
  with_file.insert(with_file.end(), {"--data", tokens});
  Result a = RunCli(base);
  Result b = RunCli(with_file);
  ASSERT_EQ(a.code, kExitOk) << a.err;
  ASSERT_EQ(b.code, kExitOk) << b.err;
  auto loss_line = [](const std::string& out) { return out.substr(out.find("step 1")); };
  EXPECT_NE(loss_line(a.out).substr(0, 30), loss_line(b.out).substr(0, 30));
}

}  // namespace
}  // namespace loom::tools::testing
