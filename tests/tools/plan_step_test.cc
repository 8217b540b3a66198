// A plan carries the step it was made from: `loom plan ... -o p.json` then
// `loom verify --plan p.json` with no other flag verifies that step; a model flag
// that agrees is accepted, one that disagrees is an error naming both values;
// plans written before the step was recorded keep working with their flags.

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "api/loom.h"
#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "ir/text_format.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Plan(const std::string& dir, std::vector<std::string> flags) {
  const std::string path = dir + "/plan.json";
  std::vector<std::string> args = {"plan", "-o", path};
  args.insert(args.end(), flags.begin(), flags.end());
  Result r = RunCli(args);
  EXPECT_EQ(r.code, kExitOk) << r.err;
  return path;
}

// Tiny, full-size, bf16 and clipped plans each verify from the plan alone.
TEST(PlanStepTest, VerifyNeedsNoModelFlags) {
  const std::vector<std::vector<std::string>> cases = {
      {"--model", "llama3-8b", "--tiny", "--layers", "2", "--tp", "2", "--pp", "2",
       "--microbatches", "4", "--max-grad-norm", "0.01"},
      {"--model", "gpt2", "--layers", "1", "--tp", "2", "--dp", "2"},
      {"--model", "llama3-8b", "--tiny", "--layers", "1", "--dp", "2", "--zero", "1",
       "--precision", "bf16"},
      {"--config", WriteTemp("plan_step.yaml",
                             "loom_model: llama3-8b\ntiny: true\nnum_layers: 2\n"
                             "tensor-model-parallel-size: 2\ndata-parallel-size: 2\n"
                             "global-batch-size: 4\nclip-grad: 0.05\n")},
  };
  for (const auto& flags : cases) {
    const std::string dir = Dir("plan_step_verify");
    const std::string plan = Plan(dir, flags);
    Result r = RunCli({"verify", "--plan", plan, "--no-cache"});
    EXPECT_EQ(r.code, kExitOk) << flags[1] << ": " << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "proved equivalent")) << r.out;
  }
}

// The plan records what it was made from, sizes as built (the configuration's
// layer count and sequence length, the batch of one sequence per replica).
TEST(PlanStepTest, ThePlanRecordsItsStep) {
  const std::string plan = Plan(Dir("plan_step_record"),
                                {"--model", "gpt2", "--tiny", "--dp", "2", "--tp", "2",
                                 "--microbatches", "3", "--max-grad-norm", "0.5",
                                 "--precision", "bf16", "--zero", "1"});
  auto loaded = ir::LoadPlanFile(plan);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->step.has_value());
  const ir::PlanStepSource& s = *loaded->step;
  EXPECT_EQ(s.model, "gpt2");
  EXPECT_TRUE(s.tiny);
  EXPECT_EQ(s.layers, 2);  // tiny gpt2's
  EXPECT_EQ(s.batch, 2);   // one sequence per replica
  EXPECT_EQ(s.seq, 8);
  EXPECT_EQ(s.training.microbatches, 3);
  EXPECT_EQ(s.training.max_grad_norm, 0.5);
  EXPECT_EQ(s.training.precision, ir::Precision::kBf16);
  // Written and read back unchanged; the step it records is the one planned.
  EXPECT_EQ(*ir::PlanFromJson(ir::PlanToJson(*loaded), "again.json"), *loaded);
  auto step = StepOfPlan(*loaded);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(ir::ValidatePlan(*step, *loaded).ok());
}

// A flag beside the plan must agree with it; a disagreeing one is an error (exit
// 2) naming both values, never a verdict about another step.
TEST(PlanStepTest, DisagreeingFlagsNameBothValues) {
  const std::string plan = Plan(Dir("plan_step_disagree"),
                                {"--model", "llama3-8b", "--tiny", "--layers", "2", "--tp", "2",
                                 "--max-grad-norm", "0.01"});
  struct Case {
    std::vector<std::string> flags;
    std::string words;
  };
  for (const Case& c : std::vector<Case>{
           {{"--max-grad-norm", "1"},
            "--max-grad-norm 1 disagrees with the plan, which was made with --max-grad-norm 0.01"},
           {{"--layers", "3"}, "--layers 3 disagrees with the plan, which was made with --layers 2"},
           {{"--model", "gpt2"}, "--model gpt2 disagrees with the plan, which was made with "
                                 "--model llama3-8b"},
           {{"--precision", "bf16"}, "--precision bf16 disagrees with the plan, which was made "
                                     "with --precision fp32"},
           {{"--seq", "4"}, "--seq 4 disagrees with the plan, which was made with --seq 8"},
       }) {
    std::vector<std::string> args = {"verify", "--plan", plan};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << c.flags[0] << ": " << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, c.words)) << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
  }
  // Flags that say what the plan says are accepted.
  Result same = RunCli({"verify", "--plan", plan, "--model", "llama3-8b", "--tiny", "--layers",
                        "2", "--max-grad-norm", "0.01", "--no-cache"});
  EXPECT_EQ(same.code, kExitOk) << same.err;
  // A full-size plan is not verified against the tiny model.
  const std::string full = Plan(Dir("plan_step_full"), {"--model", "gpt2", "--layers", "1"});
  Result tiny = RunCli({"verify", "--plan", full, "--tiny"});
  EXPECT_EQ(tiny.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(tiny.err, "--tiny disagrees with the plan, which was made at "
                                          "full size")) << tiny.err;
}

// search, simulate and run read the step from the plan too; the ordered plan the
// search writes carries it on.
TEST(PlanStepTest, SearchSimulateAndRunReadThePlan) {
  const std::string dir = Dir("plan_step_commands");
  const std::string plan = Plan(dir, {"--model", "llama3-8b", "--tiny", "--layers", "2", "--pp",
                                      "2", "--microbatches", "4", "--max-grad-norm", "0.01"});
  const std::string ordered = dir + "/ordered.json";
  Result search = RunCli({"search", "--plan", plan, "-o", ordered});
  ASSERT_EQ(search.code, kExitOk) << search.err;
  auto loaded = ir::LoadPlanFile(ordered);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(loaded->step.has_value());
  EXPECT_EQ(loaded->step->training.max_grad_norm, 0.01);
  Result simulate = RunCli({"simulate", "--plan", ordered});
  EXPECT_EQ(simulate.code, kExitOk) << simulate.err;
  Result run = RunCli({"run", ordered, "--steps", "1", "--check"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "clipping    coefficient")) << run.out;
  Result verify = RunCli({"verify", "--plan", ordered, "--no-cache"});
  EXPECT_EQ(verify.code, kExitOk) << verify.out << verify.err;
}

// A plan written before plans recorded their step keeps working with the flags
// it was made with, and without them says what is missing.
TEST(PlanStepTest, OldPlansKeepWorking) {
  const std::string dir = Dir("plan_step_old");
  const std::string plan = Plan(dir, {"--model", "gpt2", "--tiny", "--layers", "1", "--tp", "2"});
  auto loaded = ir::LoadPlanFile(plan);
  ASSERT_TRUE(loaded.ok());
  loaded->step.reset();
  const std::string old = dir + "/old.json";
  ASSERT_TRUE(ir::SavePlanFile(*loaded, old).ok());
  ASSERT_FALSE(absl::StrContains(*ir::ReadTextFile(old), "\"step\": {"));
  Result with_flags = RunCli({"verify", "--plan", old, "--model", "gpt2", "--tiny", "--layers",
                              "1", "--no-cache"});
  EXPECT_EQ(with_flags.code, kExitOk) << with_flags.err;
  Result without = RunCli({"verify", "--plan", old});
  EXPECT_EQ(without.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(without.err, "does not record the step it was made from"))
      << without.err;
}

// A plan without its step, verified with the configuration it was made from: the
// step clips at the configuration's clip_grad, not at --max-grad-norm's default.
TEST(PlanStepTest, OldPlansTakeTheConfigurationsClipping) {
  const std::string dir = Dir("plan_step_old_clip");
  const std::string config = WriteTemp("plan_step_clip.yaml",
                                       "loom_model: gpt2\ntiny: true\nnum_layers: 1\n"
                                       "tensor-model-parallel-size: 2\nclip-grad: 0.5\n");
  auto loaded = ir::LoadPlanFile(Plan(dir, {"--config", config}));
  ASSERT_TRUE(loaded.ok());
  loaded->step.reset();
  const std::string old = dir + "/old.json";
  ASSERT_TRUE(ir::SavePlanFile(*loaded, old).ok());
  Result r = RunCli({"verify", "--plan", old, "--config", config, "--no-cache"});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  Result other = RunCli(
      {"verify", "--plan", old, "--config", config, "--max-grad-norm", "1", "--no-cache"});
  EXPECT_EQ(other.code, kExitBadInput) << other.out << other.err;
  EXPECT_TRUE(absl::StrContains(other.err, "conflicts with")) << other.err;
}

// The command line builds the library's step: `loom graph` prints what
// loom::BuildStep builds of the same source (or of the same ModelConfig), the
// forward alone with --forward, every float tensor in the dtype --dtype names.
TEST(PlanStepTest, TheCommandLineBuildsTheLibrarysStep) {
  ir::PlanStepSource source;
  source.model = "gpt2";
  source.tiny = true;
  source.layers = 1;
  source.training.microbatches = 2;
  source.training.max_grad_norm = 0.5;
  const std::vector<std::string> flags = {"--model", "gpt2", "--tiny", "--layers", "1",
                                          "--microbatches", "2", "--max-grad-norm", "0.5"};
  auto graph = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"graph"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitOk) << r.err;
    return r.out;
  };
  auto step = BuildStep(source);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(graph({}), ir::PrintGraph(*step));
  // Tiny gpt2's own batch is 2 sequences.
  auto same = BuildStep(ModelConfig{.name = "gpt2", .tiny = true, .layers = 1, .batch = 2,
                                    .max_grad_norm = 0.5},
                        ParallelConfig{.microbatches = 2});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(ir::PrintGraph(*same), ir::PrintGraph(*step));

  auto forward = BuildForward(source);
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_EQ(graph({"--forward"}), ir::PrintGraph(*forward));

  auto f64 = BuildStep(source, ir::DType::kF64);
  ASSERT_TRUE(f64.ok()) << f64.status();
  EXPECT_EQ(graph({"--dtype", "f64"}), ir::PrintGraph(*f64));
  for (const ir::Tensor& t : f64->tensors()) {
    if (ir::IsFloat(t.dtype)) {
      EXPECT_EQ(t.dtype, ir::DType::kF64) << t.name;
    }
  }
}

// VerifyPlan says how far the proofs are through VerifyConfig::progress, and a
// plan that is not a plan of the step is InvalidArgument naming the item.
TEST(PlanStepTest, VerifyPlanShowsProgressAndNamesAPlanOfAnotherStep) {
  auto plan = MakePlan(ModelConfig{.name = "gpt2", .tiny = true, .layers = 1},
                       ParallelConfig{.tp = 2});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto step = StepOfPlan(*plan);
  ASSERT_TRUE(step.ok()) << step.status();
  VerifyConfig config;
  config.threads = 1;
  int calls = 0;
  verify::Progress last;
  config.progress = [&](const verify::Progress& p) {
    ++calls;
    last = p;
  };
  auto report = VerifyPlan(*step, *plan, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, verify::Verdict::kEquivalent);
  EXPECT_GE(calls, 1);
  EXPECT_GT(last.laws_total, 0);
  EXPECT_EQ(last.laws_done, last.laws_total);

  ir::Plan other = *plan;
  other.values[0].sub.tensor = 99999;
  auto rejected = VerifyPlan(*step, other, config);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.status().message(),
            "plan: value 0 (device 0, micro-batch 0): unknown tensor id 99999");
}

// The step record is read strictly: an unknown field or a wrong type is an error
// naming the field.
TEST(PlanStepTest, BadStepRecordsNameTheField) {
  const std::string plan = Plan(Dir("plan_step_bad"), {"--model", "gpt2", "--tiny", "--layers", "1"});
  const std::string text = *ir::ReadTextFile(plan);
  struct Case {
    std::string from, to, words;
  };
  for (const Case& c : std::vector<Case>{
           {"\"layers\":1", "\"layers\":\"one\"", "step.layers: expected an integer"},
           {"\"precision\":\"fp32\"", "\"precision\":\"fp16\"", "step.precision: expected one of"},
           {"\"tiny\":true", "\"tiny\":true,\"colour\":1", "step.colour: unknown field"},
           {"\"max_grad_norm\":1.0", "\"max_grad_norm\":-1", "step.max_grad_norm: -1 is out of range"},
       }) {
    std::string bad = text;
    const size_t at = bad.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    bad.replace(at, c.from.size(), c.to);
    auto parsed = ir::PlanFromJson(bad, "bad.json");
    ASSERT_FALSE(parsed.ok()) << c.to;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.words)) << parsed.status();
  }
}

}  // namespace
}  // namespace loom::tools::testing
