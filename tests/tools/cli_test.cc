#include "tools/cli.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools {
namespace {

using testing::Lines;
using testing::Result;
using testing::RunCli;
using testing::WriteTemp;

// `loom models` lists every model of the zoo.
TEST(CliTest, ModelsListsTheZoo) {
  Result r = RunCli({"models"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  for (const char* name : {"mlp", "gpt2", "llama3-8b", "llama3-70b", "llama3-405b",
                           "deepseek-v2-lite-16b", "deepseek-v2-236b", "deepseek-v3-671b"}) {
    EXPECT_TRUE(absl::StrContains(r.out, name)) << name;
  }
}

// `loom show` prints the parameter line and FLOPs per token of a tiny model.
TEST(CliTest, ShowPrintsParametersAndFlops) {
  Result r = RunCli({"show", "--model", "llama3-8b", "--tiny"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\nparameters:")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "flops/token:")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "adamw")) << r.out;
}

// An unknown model is one error line naming it, exit 2.
TEST(CliTest, UnknownModelIsOneLineExit2) {
  Result r = RunCli({"show", "--model", "llama9-1t"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "llama9-1t")) << r.err;
}

// Unknown flags and bad values are one error line, exit 2, on every subcommand.
TEST(CliTest, BadFlagsAreOneLineExit2) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"show", "--modle", "gpt2"},
           {"show", "--model", "gpt2", "--layers", "zero"},
           {"show", "--model", "gpt2", "--layers", "0"},
           {"show", "--model"},
           {"graph", "--model", "gpt2", "--format", "yaml"},
           {"graph", "--model", "gpt2", "--tiny", "--optimizer", "lion"},
           {"models", "--all"},
           {"frobnicate"},
       }) {
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << absl::StrJoin(args, " ");
    EXPECT_EQ(Lines(r.err), 1) << r.err;
  }
}

// `--help` works on every subcommand and exits 0.
TEST(CliTest, HelpOnEverySubcommand) {
  for (const char* cmd : {"models", "ops", "plan", "show", "graph", "search", "simulate",
                          "verify", "run"}) {
    Result r = RunCli({cmd, "--help"});
    EXPECT_EQ(r.code, kExitOk) << cmd;
    EXPECT_TRUE(absl::StrContains(r.out, "usage: loom")) << cmd;
  }
  EXPECT_EQ(RunCli({"--help"}).code, kExitOk);
}

// A malformed graph file gets file:line:column, one line, exit 2.
TEST(CliTest, MalformedGraphFileNamesLineAndColumn) {
  std::string path = WriteTemp("bad.loom", "graph \"g\" {\n  %x = input f32[2,3]\n  %y = matmull(%x, %x) : f32[2,2] @forward\n}\n");
  Result r = RunCli({"show", "--graph", path});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "bad.loom:3:")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "matmull")) << r.err;
}

// An op whose input shapes do not fit is reported with its place, exit 2.
TEST(CliTest, MismatchedShapesNameTheOp) {
  std::string path = WriteTemp("shapes.loom", "graph \"g\" {\n  %a = input f32[2,3]\n  %b = input f32[2,4]\n  %c = add(%a, %b) : f32[2,3] @forward\n}\n");
  Result r = RunCli({"show", "--graph", path});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "shapes.loom:4:")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "add")) << r.err;
}

// A graph written by `loom graph` reads back in `loom show --graph`, text and JSON.
TEST(CliTest, GraphWritesFilesThatShowReads) {
  for (const char* ext : {".loom", ".json"}) {
    std::string path = ::testing::TempDir() + "tiny_gpt2" + ext;
    Result w = RunCli({"graph", "--model", "gpt2", "--tiny", "-o", path});
    ASSERT_EQ(w.code, kExitOk) << w.err;
    Result r = RunCli({"show", "--graph", path});
    ASSERT_EQ(r.code, kExitOk) << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "\nparameters:")) << r.out;
  }
}

// A missing graph file is NotFound: one line naming the path, exit 2.
TEST(CliTest, MissingGraphFileNamesPath) {
  Result r = RunCli({"show", "--graph", "/nonexistent/g.loom"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(r.err, "/nonexistent/g.loom")) << r.err;
}

// Readers take regular files only: a device or a directory is one error line,
// exit 2, at once (never read until memory runs out).
TEST(CliTest, InputsThatAreNotRegularFilesAreRefused) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"show", "--graph", "/dev/zero"},
           {"show", "--graph", "/tmp"},
           {"simulate", "/dev/zero"},
       }) {
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << args[1] << " " << args[2];
    EXPECT_TRUE(absl::StrContains(r.err, args.back())) << r.err;
  }
}

// Layer counts past Loom's bound are refused by the flag and by a configuration.
TEST(CliTest, LayerAndMicrobatchBoundsAreTheSameInFlagsAndConfigurations) {
  const std::string out = ::testing::TempDir() + "never.json";
  Result flag = RunCli({"plan", "--model", "gpt2", "--tiny", "--layers", "100000", "-o", out});
  EXPECT_EQ(flag.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(flag.err, "[1, 1024]")) << flag.err;
  const std::string yaml = ::testing::TempDir() + "many_microbatches.yaml";
  {
    std::ofstream f(yaml);
    f << "loom_model: gpt2\ntiny: true\nnum_layers: 1\ndata_parallel_size: 2\n"
         "micro_batch_size: 1\nglobal_batch_size: 20000\n";
  }
  Result config = RunCli({"plan", "--config", yaml, "-o", out});
  EXPECT_EQ(config.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(config.err, "above 1024")) << config.err;
}

// The CI job of docs/ci.md as written: the plan made from a configuration is
// searched and verified against the same configuration (its own sequence length,
// not the model's default), and run by `loom run --check`.
TEST(CliTest, CommandsReadThePlansConfiguration) {
  const std::string dir = ::testing::TempDir();
  const std::string yaml = dir + "train.yaml";
  {
    std::ofstream f(yaml);
    f << "loom_model: gpt2\ntiny: true\nnum_layers: 2\nseq_length: 12\n"
         "tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\n"
         "data_parallel_size: 2\nmicro_batch_size: 1\nglobal_batch_size: 8\n";
  }
  const std::string plan = dir + "ci_plan.json";
  const std::string ordered = dir + "ci_plan.ordered.json";
  ASSERT_EQ(RunCli({"plan", "--config", yaml, "-o", plan}).code, kExitOk);
  Result search = RunCli({"search", "--plan", plan, "--config", yaml, "-o", ordered});
  ASSERT_EQ(search.code, kExitOk) << search.err;
  Result verify = RunCli({"verify", "--config", yaml, "--plan", ordered});
  EXPECT_EQ(verify.code, kExitOk) << verify.out << verify.err;
  EXPECT_TRUE(absl::StrContains(verify.out, "proved equivalent")) << verify.out;
  EXPECT_TRUE(absl::StrContains(verify.out, "(model gpt2)")) << verify.out;
  Result run = RunCli({"run", plan, "--config", yaml, "--steps", "1", "--check"});
  EXPECT_EQ(run.code, kExitOk) << run.out << run.err;
  // The plan carries its step (the configuration's sequence length, not the
  // model's default): the model flags alone read it, a sequence length that
  // disagrees is refused naming both.
  Result flags = RunCli({"verify", "--model", "gpt2", "--tiny", "--plan", ordered});
  EXPECT_EQ(flags.code, kExitOk) << flags.err;
  Result seq = RunCli({"verify", "--model", "gpt2", "--tiny", "--seq", "8", "--plan", ordered});
  EXPECT_EQ(seq.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(seq.err, "--seq 8 disagrees with the plan, which was made with "
                                         "--seq 12")) << seq.err;
  // A parallel flag beside --config is refused by name, as in `loom plan`.
  Result both = RunCli({"verify", "--config", yaml, "--microbatches", "2", "--plan", ordered});
  EXPECT_EQ(both.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(both.err, "--microbatches given beside --config")) << both.err;
}

// `loom plan` writes a factored plan that reads back, and prints its size.
TEST(CliTest, PlanWritesAPlanFile) {
  std::string path = ::testing::TempDir() + "plan.json";
  Result r = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--dp", "2", "--tp", "2", "--pp",
                     "2", "--microbatches", "2", "-o", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "8 devices")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "factored")) << r.out;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "\"loom.plan\"")) << text.substr(0, 200);
}

// ZeRO over a dp that no dim of some parameters divides leaves them whole, and
// says which: a configuration is never silently reinterpreted.
TEST(CliTest, PlanSaysWhichParametersZeroLeavesWhole) {
  std::string path = ::testing::TempDir() + "zero.json";
  Result even = RunCli({"plan", "--model", "gpt2", "--tiny", "--layers", "1", "--dp", "2",
                        "--batch", "2", "--zero", "1", "-o", path});
  ASSERT_EQ(even.code, kExitOk) << even.err;
  EXPECT_FALSE(absl::StrContains(even.out, "zero: ")) << even.out;
  Result odd = RunCli({"plan", "--model", "gpt2", "--tiny", "--layers", "1", "--dp", "3",
                       "--batch", "3", "--zero", "1", "-o", path});
  ASSERT_EQ(odd.code, kExitOk) << odd.err;
  EXPECT_TRUE(absl::StrContains(odd.out, "left whole over dp 3")) << odd.out;
  EXPECT_TRUE(absl::StrContains(odd.out, "layers.0.ln1.gamma")) << odd.out;
}

// Impossible strategies are one error line each, exit 2, and no file is written.
TEST(CliTest, PlanRejectsBadStrategiesInOneLine) {
  std::string path = ::testing::TempDir() + "never.json";
  std::remove(path.c_str());
  for (std::vector<std::string> extra : std::vector<std::vector<std::string>>{
           {"--tp", "3"},
           {"--pp", "64"},
           {"--dp", "3"},
           {"--sp"},
           {"--zero", "4"},
           {"--zero", "1"},
           {"--vpp", "2"},
           {"--ep", "2", "--dp", "2"},
           {"--dp", "zero"},
       }) {
    std::vector<std::string> args = {"plan", "--model", "llama3-8b", "--tiny", "--batch", "4",
                                     "-o", path};
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << absl::StrJoin(extra, " ") << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_FALSE(std::ifstream(path).good()) << absl::StrJoin(extra, " ");
  }
}

#ifdef LOOM_BINARY
// The installed binary maps errors to exit code 2 (checks main() end to end).
TEST(CliBinaryTest, ExitCodeTwoFromProcess) {
  std::string cmd = std::string(LOOM_BINARY) + " show --model nope 2>/dev/null";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}
#endif

}  // namespace
}  // namespace loom::tools
