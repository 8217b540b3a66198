// The training precision on the command line and in configurations: --precision
// fp32|bf16 wherever the model flags are, `bf16: true` (and NeMo's
// trainer.precision) in a YAML configuration, never one read as the other.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "api/loom.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<std::string> kTinyLlama = {"--model", "llama3-8b", "--tiny", "--layers", "2"};

std::vector<std::string> Args(std::vector<std::string> head,
                              const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// A bf16 plan of llama3-8b under dp2 tp2 pp2 ZeRO-1 with two micro-batches.
std::string Bf16Plan() {
  const std::string path = ::testing::TempDir() + "bf16_plan.json";
  Result r = RunCli(Args({"plan"}, Args(kTinyLlama, {"--dp", "2", "--tp", "2", "--pp", "2",
                                                      "--zero", "1", "--microbatches", "2",
                                                      "--precision", "bf16", "-o", path})));
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "precision:    bf16")) << r.out;
  return path;
}

// Every command that takes the model flags refuses a precision it does not know,
// in one line naming the accepted values: exit 2.
TEST(PrecisionTest, UnknownPrecisionIsOneLineExit2) {
  const std::string plan = Bf16Plan();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           Args({"plan", "-o", ::testing::TempDir() + "never.json"}, kTinyLlama),
           Args({"graph"}, kTinyLlama),
           Args({"show"}, kTinyLlama),
           Args({"verify", "--plan", plan}, kTinyLlama),
           Args({"search", "--plan", plan, "-o", ::testing::TempDir() + "never.json"},
                kTinyLlama),
       }) {
    for (const char* bad : {"fp16", "BF16", "mixed"}) {
      Result r = RunCli(Args(args, {"--precision", bad}));
      EXPECT_EQ(r.code, kExitBadInput) << args[0] << " " << bad << ": " << r.err;
      EXPECT_EQ(Lines(r.err), 1) << r.err;
      EXPECT_TRUE(absl::StrContains(r.err, "bf16, fp32")) << args[0] << ": " << r.err;
      EXPECT_TRUE(absl::StrContains(r.err, bad)) << r.err;
    }
  }
  Result run = RunCli(Args({"run", plan}, Args(kTinyLlama, {"--precision", "fp16"})));
  EXPECT_EQ(run.code, kExitBadInput) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "expected fp32, bf16 or fp64")) << run.err;
}

// The bf16 plan is proved equivalent to the bf16 step, searched, and run against
// the single-device reference; read as an fp32 plan it is refused by name.
TEST(PrecisionTest, Bf16PlanVerifiesSearchesAndRuns) {
  const std::string plan = Bf16Plan();
  const std::vector<std::string> bf16 = Args(kTinyLlama, {"--precision", "bf16"});
  Result verify = RunCli(Args({"verify", "--plan", plan}, bf16));
  EXPECT_EQ(verify.code, kExitOk) << verify.out << verify.err;
  EXPECT_TRUE(absl::StrContains(verify.out, "proved equivalent")) << verify.out;
  const std::string ordered = ::testing::TempDir() + "bf16_plan.ordered.json";
  Result search = RunCli(Args({"search", "--plan", plan, "-o", ordered}, bf16));
  EXPECT_EQ(search.code, kExitOk) << search.err;
  Result run = RunCli(Args({"run", ordered, "--steps", "2", "--check"}, bf16));
  EXPECT_EQ(run.code, kExitOk) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "bf16 (computed in fp32)")) << run.out;
  // The plan carries its precision: the model flags alone verify the bf16 step;
  // an fp32 reading is refused by name.
  Result plain = RunCli(Args({"verify", "--plan", plan, "--no-cache"}, kTinyLlama));
  EXPECT_EQ(plain.code, kExitOk) << plain.out << plain.err;
  struct Bad {
    std::vector<std::string> args;
    std::string words;
  };
  for (const Bad& bad : std::vector<Bad>{
           {Args({"verify", "--plan", plan}, Args(kTinyLlama, {"--precision", "fp32"})),
            "--precision fp32 disagrees with the plan, which was made with --precision bf16"},
           {Args({"run", plan, "--precision", "fp64"}, kTinyLlama),
            "--precision fp64 runs an fp32 step, but the configuration's step is bf16"},
       }) {
    Result r = RunCli(bad.args);
    EXPECT_EQ(r.code, kExitBadInput) << r.out << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, bad.words)) << r.err;
  }
  // A plan without its step, read with the fp32 flags, is refused naming the
  // parameter's dtype.
  auto loaded = ir::LoadPlanFile(plan);
  ASSERT_TRUE(loaded.ok());
  loaded->step.reset();
  const std::string old = ::testing::TempDir() + "bf16_plan.old.json";
  ASSERT_TRUE(ir::SavePlanFile(*loaded, old).ok());
  Result r = RunCli(Args({"verify", "--plan", old}, kTinyLlama));
  EXPECT_EQ(r.code, kExitBadInput) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "the plan holds parameter 'embed' in bf16")) << r.err;
}

// `graph --precision bf16` writes the mixed-precision step (and `show` says so);
// --dtype may only repeat its parameter dtype.
TEST(PrecisionTest, GraphWritesTheMixedPrecisionStep) {
  Result r = RunCli(Args({"graph"}, Args(kTinyLlama, {"--precision", "bf16"})));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "%embed = parameter bf16[128,32]")) << r.out.substr(0, 400);
  EXPECT_TRUE(absl::StrContains(r.out, "%embed.master = state f32[128,32]"));
  EXPECT_TRUE(absl::StrContains(r.out, "%main_grad.embed = cast("));
  Result same = RunCli(Args({"graph", "--dtype", "bf16"}, Args(kTinyLlama, {"--precision", "bf16"})));
  EXPECT_EQ(same.code, kExitOk) << same.err;
  EXPECT_EQ(same.out, r.out);
  Result conflict = RunCli(Args({"graph", "--dtype", "f32"}, Args(kTinyLlama, {"--precision", "bf16"})));
  EXPECT_EQ(conflict.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(conflict.err, "--dtype f32 conflicts with --precision bf16"))
      << conflict.err;
  Result plain = RunCli(Args({"graph"}, kTinyLlama));
  ASSERT_EQ(plain.code, kExitOk) << plain.err;
  EXPECT_FALSE(absl::StrContains(plain.out, ".master")) << "fp32 is the default";
  Result show = RunCli(Args({"show"}, Args(kTinyLlama, {"--precision", "bf16"})));
  ASSERT_EQ(show.code, kExitOk) << show.err;
  EXPECT_TRUE(absl::StrContains(show.out, "bf16 mixed precision with f32 masters")) << show.out;
  Result show32 = RunCli(Args({"show"}, kTinyLlama));
  EXPECT_FALSE(absl::StrContains(show32.out, "mixed precision")) << show32.out;
}

// `bf16: true` in a configuration plans what --precision bf16 plans, and the
// other commands read it from the file; --precision beside it must agree.
TEST(PrecisionTest, ConfigBf16IsTheFlag) {
  const std::string yaml = WriteTemp(
      "bf16.yaml",
      "loom_model: llama3-8b\ntiny: true\nnum_layers: 2\ndata_parallel_size: 2\n"
      "tensor_model_parallel_size: 2\nuse_distributed_optimizer: true\nbf16: true\n");
  const std::string from_yaml = ::testing::TempDir() + "bf16_yaml.json";
  const std::string from_flags = ::testing::TempDir() + "bf16_flags.json";
  Result a = RunCli({"plan", "--config", yaml, "-o", from_yaml});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  Result b = RunCli(Args({"plan"}, Args(kTinyLlama, {"--dp", "2", "--tp", "2", "--zero", "1",
                                                     "--precision", "bf16", "-o", from_flags})));
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_TRUE(Slurp(from_yaml) == Slurp(from_flags)) << "the plans differ";
  Result verify = RunCli({"verify", "--config", yaml, "--plan", from_yaml});
  EXPECT_EQ(verify.code, kExitOk) << verify.out << verify.err;
  Result agree = RunCli({"verify", "--config", yaml, "--precision", "bf16", "--plan", from_yaml});
  EXPECT_EQ(agree.code, kExitOk) << agree.out << agree.err;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"plan", "--config", yaml, "--precision", "fp32", "-o", from_flags},
           {"verify", "--config", yaml, "--precision", "fp32", "--plan", from_yaml},
       }) {
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "--precision fp32 conflicts with")) << r.err;
  }
}

// The configuration's precision keys: bf16 (Megatron-LM), trainer.precision
// (NeMo); fp16, fp8 and pure bf16 are refused by key, and so are two keys that
// disagree. Absent, the step is fp32.
TEST(PrecisionTest, ConfigPrecisionKeys) {
  const std::string head = "loom_model: gpt2\n";
  struct Good {
    std::string yaml;
    ir::Precision precision;
  };
  for (const Good& g : std::vector<Good>{
           {head, ir::Precision::kFp32},
           {head + "bf16: true\n", ir::Precision::kBf16},
           {head + "bf16: false\nfp16: false\n", ir::Precision::kFp32},
           {head + "model:\n  bf16: true\n", ir::Precision::kBf16},
           {head + "trainer: {precision: bf16-mixed}\n", ir::Precision::kBf16},
           {head + "trainer: {precision: 32}\n", ir::Precision::kFp32},
           {head + "trainer: {precision: bf16}\nbf16: true\n", ir::Precision::kBf16},
           {head + "fp8: null\nbf16: true\n", ir::Precision::kBf16},
           {head + "fp8: false\n", ir::Precision::kFp32},
       }) {
    auto c = ParseTrainConfig(g.yaml, "p.yaml");
    ASSERT_TRUE(c.ok()) << g.yaml << c.status();
    EXPECT_EQ(c->model.precision, g.precision) << g.yaml;
  }
  struct Bad {
    std::string yaml, words;
  };
  for (const Bad& b : std::vector<Bad>{
           {head + "fp16: true\n", "p.yaml:2:1: key 'fp16': fp16 training"},
           {head + "bf16: true\nfp16: true\n", "key 'fp16': fp16 training"},
           {head + "bf16: yes please\n", "key 'bf16': expected true or false"},
           {head + "fp8: hybrid\n", "key 'fp8': fp8 training is not supported"},
           {head + "trainer: {precision: 16-mixed}\n", "key 'trainer.precision': fp16 training"},
           {head + "trainer: {precision: bf16-true}\n", "'bf16-true' is not supported"},
           {head + "trainer: {precision: bf16-mixed}\nbf16: false\n",
            "'bf16-mixed' conflicts with bf16: false"},
           {head + "trainer: {precision: 32}\nbf16: true\n", "'32' conflicts with bf16: true"},
       }) {
    auto c = ParseTrainConfig(b.yaml, "p.yaml");
    ASSERT_FALSE(c.ok()) << b.yaml;
    EXPECT_TRUE(absl::StrContains(c.status().message(), b.words)) << c.status();
  }
}

// The library builds the step the configuration names, in its precision.
TEST(PrecisionTest, LibraryBuildsTheBf16Step) {
  ModelConfig model{.name = "llama3-8b", .tiny = true, .layers = 1,
                    .precision = ir::Precision::kBf16};
  ParallelConfig parallel{.dp = 2, .zero = 1, .microbatches = 2};
  auto step = BuildStep(model, parallel);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->FindTensor("embed.master").has_value());
  EXPECT_EQ(step->tensor(*step->FindTensor("embed")).dtype, ir::DType::kBF16);
  auto plan = MakePlan(*step, parallel);
  ASSERT_TRUE(plan.ok()) << plan.status();
  VerifyConfig config;
  config.threads = 1;
  auto report = VerifyPlan(*step, *plan, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, verify::Verdict::kEquivalent);
}

}  // namespace
}  // namespace loom::tools::testing
