// `loom verify`: exit codes, the printed failures, the report and JUnit files, the
// proof cache. Plans are tiny one-layer gpt2 plans so that each run takes seconds.

#include "tools/verify_command.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "ir/plan.h"
#include "ir/plan_json.h"
#include "tests/testing/xml_check.h"
#include "tests/tools/cli_test_util.h"
#include "tools/cli.h"

namespace loom::tools {
namespace {

using ::loom::testing::XmlWellFormedError;
using testing::Lines;
using testing::Result;
using testing::RunCli;
using testing::WriteTemp;

const std::vector<std::string> kModel = {"--model", "gpt2", "--tiny", "--layers", "1"};

// A fresh directory under the test's temporary directory.
std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes a one-layer tensor-parallel (tp 2) gpt2 plan with `loom plan`.
std::string WritePlan(const std::string& dir) {
  std::vector<std::string> args = {"plan", "--tp", "2", "--explicit", "-o", dir + "/plan.json"};
  args.insert(args.end(), kModel.begin(), kModel.end());
  Result r = RunCli(args);
  EXPECT_EQ(r.code, kExitOk) << r.err;
  return dir + "/plan.json";
}

// The same plan with its first forward all-reduce turned into a broadcast: the
// partial sums of the row-parallel linear are never summed.
std::string WriteMutatedPlan(const std::string& dir) {
  auto plan = ir::LoadPlanFile(WritePlan(dir));
  EXPECT_TRUE(plan.ok()) << plan.status();
  bool mutated = false;
  for (ir::Collective& c : plan->collectives) {
    if (c.kind == ir::CollectiveKind::kAllReduce && c.phase == ir::Phase::kForward) {
      c.kind = ir::CollectiveKind::kBroadcast;
      c.inputs.resize(1);
      mutated = true;
      break;
    }
  }
  EXPECT_TRUE(mutated) << "the plan has no forward all-reduce";
  const std::string path = dir + "/mutated.json";
  EXPECT_TRUE(ir::SavePlanFile(*plan, path).ok());
  return path;
}

Result Verify(const std::string& plan, std::vector<std::string> extra) {
  std::vector<std::string> args = {"verify", "--plan", plan};
  args.insert(args.end(), kModel.begin(), kModel.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return RunCli(args);
}

// Bad input still leaves a report and a JUnit file saying why (verdict "error",
// an <error> testcase), with exit 2; a report that cannot be written is refused
// before any work.
TEST(VerifyCommandTest, BadInputLeavesAReportAndUnwritableReportsAreRefused) {
  const std::string dir = ::testing::TempDir();
  const std::string report = dir + "bad_input_report.json", junit = dir + "bad_input.xml";
  std::filesystem::remove(report);
  std::filesystem::remove(junit);
  Result r = RunCli({"verify", "--model", "gpt2", "--tiny", "--plan", "/nonexistent/plan.json",
                     "--report", report, "--junit", junit});
  EXPECT_EQ(r.code, 2);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string json = read(report), xml = read(junit);
  EXPECT_TRUE(absl::StrContains(json, "\"verdict\": \"error\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "/nonexistent/plan.json: no such file")) << json;
  EXPECT_TRUE(absl::StrContains(xml, "errors=\"1\"")) << xml;
  EXPECT_TRUE(absl::StrContains(xml, "<error type=\"bad_input\"")) << xml;
  Result unwritable = RunCli({"verify", "--model", "gpt2", "--tiny", "--plan", "p.json",
                              "--report", "/nonexistent/dir/r.json"});
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_TRUE(absl::StrContains(unwritable.err, "/nonexistent/dir/r.json: cannot write there"))
      << unwritable.err;
}

// An expert-parallel plan (its mesh carves ep out of the data-parallel ranks)
// verifies without --batch: the default batch is one sequence per data-parallel
// rank, as `loom plan` built it.
TEST(VerifyCommandTest, ExpertParallelPlanNeedsNoBatchFlag) {
  const std::string dir = TempDir("ep_plan");
  const std::vector<std::string> model = {"--model", "deepseek-v3-671b", "--tiny", "--layers",
                                          "2"};
  std::vector<std::string> plan = {"plan", "--dp", "2", "--ep", "2", "--microbatches", "2",
                                   "-o", dir + "/plan.json"};
  plan.insert(plan.end(), model.begin(), model.end());
  Result made = RunCli(plan);
  ASSERT_EQ(made.code, kExitOk) << made.err;
  std::vector<std::string> verify = {"verify", "--plan", dir + "/plan.json", "--no-cache"};
  verify.insert(verify.end(), model.begin(), model.end());
  Result r = RunCli(verify);
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "proved equivalent")) << r.out;
}

// A correct plan is proved equivalent (exit 0) and writes its report and JUnit file;
// a second run over the same cache takes every law from it.
TEST(VerifyCommandTest, ProvesACorrectPlanAndCachesItsLaws) {
  const std::string dir = TempDir("verify_ok");
  const std::string plan = WritePlan(dir);
  const std::string cache = dir + "/cache";
  Result r = Verify(plan, {"--cache", cache, "--report", dir + "/r.json", "--junit",
                           dir + "/v.xml"});
  ASSERT_EQ(r.code, kExitOk) << r.out << r.err;
  EXPECT_EQ(r.err, "");  // no progress line when standard error is not a terminal
  EXPECT_TRUE(absl::StartsWith(r.out, "verdict:      proved equivalent\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "failures:     0\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "wrote " + dir + "/r.json\n")) << r.out;

  auto text = ir::ReadTextFile(dir + "/r.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const ir::Json j = ir::Json::parse(*text);
  EXPECT_EQ(j["format"], "loom.verify.report");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["verdict"], "equivalent");
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_EQ(j["model"], "gpt2");
  EXPECT_EQ(j["plan"], plan);
  EXPECT_GT(j["counts"]["items"].get<int64_t>(), 0);
  EXPECT_GT(j["counts"]["laws"].get<int64_t>(), 0);
  EXPECT_LE(j["counts"]["distinct_stages"].get<int64_t>(), j["counts"]["stages"].get<int64_t>());
  EXPECT_LE(j["counts"]["stages_reused"].get<int64_t>(), j["counts"]["stages"].get<int64_t>());
  EXPECT_EQ(j["counts"]["laws_proved"], j["counts"]["laws"]);
  EXPECT_EQ(j["counts"]["cache_hits"], 0);
  EXPECT_TRUE(j["failures"].empty());
  EXPECT_TRUE(j["undecided"].empty());
  EXPECT_EQ(j["laws"].size(), j["counts"]["laws"].get<size_t>());
  EXPECT_TRUE(j["schedule"].contains("checked"));
  auto xml = ir::ReadTextFile(dir + "/v.xml");
  ASSERT_TRUE(xml.ok()) << xml.status();
  EXPECT_EQ(XmlWellFormedError(*xml), "") << *xml;
  EXPECT_TRUE(absl::StrContains(*xml, "<testsuite name=\"loom.verify\"")) << *xml;
  EXPECT_FALSE(absl::StrContains(*xml, "<failure")) << *xml;

  Result again = Verify(plan, {"--cache", cache, "--report", dir + "/r2.json"});
  ASSERT_EQ(again.code, kExitOk) << again.out << again.err;
  auto text2 = ir::ReadTextFile(dir + "/r2.json");
  ASSERT_TRUE(text2.ok());
  const ir::Json j2 = ir::Json::parse(*text2);
  EXPECT_EQ(j2["counts"]["cache_hits"], j["counts"]["laws"]);
  const std::string hits = absl::StrCat(j["counts"]["laws"].get<int64_t>(), " from the cache");
  EXPECT_TRUE(absl::StrContains(again.out, hits)) << again.out;
}

// A plan whose forward all-reduce no longer sums is not equivalent (exit 1): the
// failure's class, tensor and place are printed, in the report and as a JUnit
// <failure>. A cache directory that cannot be created is one warning, not an error.
TEST(VerifyCommandTest, RejectsAMutatedPlanWithItsClass) {
  const std::string dir = TempDir("verify_bad");
  const std::string plan = WriteMutatedPlan(dir);
  const std::string not_a_dir = WriteTemp("verify_cache_file", "x");
  Result r = Verify(plan, {"--cache", not_a_dir + "/cache", "--report", dir + "/r.json",
                           "--junit", dir + "/v.xml"});
  ASSERT_EQ(r.code, kExitFailure) << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.out, "verdict:      not equivalent\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "failure 1 of ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, ": missing reduction (missing_reduction)\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  tensor:         ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  message:        ")) << r.out;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "warning: cannot create cache directory")) << r.err;

  auto text = ir::ReadTextFile(dir + "/r.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const ir::Json j = ir::Json::parse(*text);
  EXPECT_EQ(j["verdict"], "not_equivalent");
  EXPECT_EQ(j["exit_code"], 1);
  ASSERT_FALSE(j["failures"].empty());
  const ir::Json& f = j["failures"][0];
  EXPECT_EQ(f["class"], "missing_reduction");
  EXPECT_EQ(f["class_words"], "missing reduction");
  EXPECT_FALSE(f["tensor"].get<std::string>().empty());
  EXPECT_FALSE(f["item"].get<std::string>().empty());
  auto xml = ir::ReadTextFile(dir + "/v.xml");
  ASSERT_TRUE(xml.ok());
  EXPECT_EQ(XmlWellFormedError(*xml), "") << *xml;
  EXPECT_TRUE(absl::StrContains(*xml, "<failure type=\"missing_reduction\" message=\"")) << *xml;
}

// A scheduled plan has its order checked: over a --memory capacity it is not
// equivalent, with a memory failure in the JUnit "schedule safety" test case.
TEST(VerifyCommandTest, ChecksTheScheduleAgainstMemory) {
  const std::string dir = TempDir("verify_schedule");
  const std::vector<std::string> model = {"--model", "gpt2", "--tiny", "--layers", "2"};
  std::vector<std::string> plan = {"plan", "--pp", "2", "--microbatches", "2", "--explicit",
                                   "-o", dir + "/pp.json"};
  plan.insert(plan.end(), model.begin(), model.end());
  ASSERT_EQ(RunCli(plan).code, kExitOk);
  std::vector<std::string> search = {"search", "--plan", dir + "/pp.json", "-o",
                                     dir + "/ordered.json"};
  search.insert(search.end(), model.begin(), model.end());
  Result s = RunCli(search);
  ASSERT_EQ(s.code, kExitOk) << s.err;
  std::vector<std::string> verify = {"verify", "--plan", dir + "/ordered.json", "--no-cache",
                                     "--memory", "1000", "--junit", dir + "/v.xml"};
  verify.insert(verify.end(), model.begin(), model.end());
  Result r = RunCli(verify);
  ASSERT_EQ(r.code, kExitFailure) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "schedule:     checked, peak memory ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, ": memory above capacity (memory)\n")) << r.out;
  auto xml = ir::ReadTextFile(dir + "/v.xml");
  ASSERT_TRUE(xml.ok());
  EXPECT_EQ(XmlWellFormedError(*xml), "") << *xml;
  const size_t schedule = xml->find("name=\"schedule safety\"");
  ASSERT_NE(schedule, std::string::npos) << *xml;
  EXPECT_NE(xml->find("<failure type=\"memory\"", schedule), std::string::npos) << *xml;
}

// A factored plan is ordered without being expanded: search writes the scale
// unit's programs into it, verify checks them and says whether the plan fits,
// simulate times that order and run executes it.
TEST(VerifyCommandTest, FactoredPlanCarriesItsOrderThroughEveryCommand) {
  const std::string dir = TempDir("verify_factored_order");
  const std::vector<std::string> model = {"--model", "llama3-8b", "--tiny", "--layers", "2"};
  auto with_model = [&](std::vector<std::string> args) {
    args.insert(args.end(), model.begin(), model.end());
    return args;
  };
  ASSERT_EQ(RunCli(with_model({"plan", "--dp", "2", "--tp", "2", "--pp", "2", "--zero", "1",
                               "--microbatches", "3", "-o", dir + "/p.json"}))
                .code,
            kExitOk);
  Result s = RunCli(with_model({"search", "--plan", dir + "/p.json", "-o", dir + "/o.json"}));
  ASSERT_EQ(s.code, kExitOk) << s.err;
  EXPECT_TRUE(absl::StrContains(s.out, "the factored plan with the order of each scale-unit"))
      << s.out;
  auto text = ir::ReadTextFile(dir + "/o.json");
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(absl::StrContains(*text, "\"factoring\"")) << "the ordered plan stays factored";
  EXPECT_TRUE(absl::StrContains(*text, "\"order_segments\""));

  Result fits = RunCli(with_model({"verify", "--plan", dir + "/o.json", "--no-cache", "--memory",
                                   "1GiB"}));
  ASSERT_EQ(fits.code, kExitOk) << fits.out << fits.err;
  EXPECT_TRUE(absl::StrContains(fits.out, "schedule:     checked on the scale unit (4 device "
                                          "programs, run by each of 2 data-parallel replicas)"))
      << fits.out;
  EXPECT_TRUE(absl::StrContains(fits.out, "memory:       device ")) << fits.out;
  EXPECT_TRUE(absl::StrContains(fits.out, "per device: the plan fits")) << fits.out;
  Result over = RunCli(with_model({"verify", "--plan", dir + "/o.json", "--no-cache", "--memory",
                                   "1000", "--report", dir + "/r.json"}));
  ASSERT_EQ(over.code, kExitFailure) << over.out << over.err;
  EXPECT_TRUE(absl::StrContains(over.out, "the plan does NOT fit")) << over.out;
  auto report = ir::ReadTextFile(dir + "/r.json");
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(absl::StrContains(*report, "\"fits\": false")) << *report;
  EXPECT_TRUE(absl::StrContains(*report, "\"replicas\": 2")) << *report;
  EXPECT_TRUE(absl::StrContains(*report, "\"optimizer_states\": ")) << *report;

  Result sim = RunCli(with_model({"simulate", "--plan", dir + "/o.json"}));
  ASSERT_EQ(sim.code, kExitOk) << sim.err;
  EXPECT_TRUE(absl::StrContains(sim.out, "schedule:     plan order")) << sim.out;
  Result unordered = RunCli(with_model({"simulate", "--plan", dir + "/p.json"}));
  EXPECT_EQ(unordered.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(unordered.err, "no per-device order")) << unordered.err;

  Result run = RunCli(with_model({"run", dir + "/o.json", "--check"}));
  ASSERT_EQ(run.code, kExitOk) << run.out << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "within tolerance")) << run.out;
}

// Bad input exits 2 with one error line naming the file or flag; nothing is verified.
TEST(VerifyCommandTest, BadInputIsOneLineExit2) {
  const std::string dir = TempDir("verify_input");
  const std::string plan = WritePlan(dir);
  const std::string bad_json = WriteTemp("verify_bad.json", "{\"format\": \"loom.plan\", ");
  struct Case {
    std::vector<std::string> args;
    std::string expect;  // in the error line
  };
  const std::vector<Case> cases = {
      {{"verify", "--plan", dir + "/none.json", "--model", "gpt2", "--tiny"}, "none.json"},
      {{"verify", "--plan", bad_json, "--model", "gpt2", "--tiny"}, "verify_bad.json: parse error"},
      {{"verify", "--plan", plan, "--model", "gpt2", "--tiny", "--layers", "2"},
       "--layers 2 disagrees with the plan, which was made with --layers 1"},
      {{"verify", "--plan", plan, "--model", "llama9", "--tiny"}, "llama9"},
      {{"verify", "--model", "gpt2"}, "missing --plan"},
      {{"verify", "--plan", plan, "--model", "gpt2", "--timeout", "0"}, "--timeout"},
      {{"verify", "--plan", plan, "--model", "gpt2", "--threads", "many"}, "--threads"},
      {{"verify", "--plan", plan, "--model", "gpt2", "--cache", dir, "--no-cache"}, "--no-cache"},
      {{"verify", "--plan", plan, "--model", "gpt2", "--frobnicate"}, "--frobnicate"},
  };
  for (const Case& c : cases) {
    Result r = RunCli(c.args);
    EXPECT_EQ(r.code, kExitBadInput) << absl::StrJoin(c.args, " ") << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.expect)) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "loom verify: error: ")) << r.err;
    EXPECT_EQ(r.out, "") << r.out;
  }
}

// A plan that is not a plan of its step is named so, with the item, in one error
// line (exit 2), and the proof cache is not spoken of; an error the derivation
// meets in a plan that passes those checks (a dependency cycle) is not called so,
// and follows the cache's warning.
TEST(VerifyCommandTest, NamesAPlanThatIsNotAPlanOfItsStep) {
  const std::string dir = TempDir("verify_not_a_plan");
  auto plan = ir::LoadPlanFile(WritePlan(dir));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string unusable_cache = WriteTemp("verify_not_a_plan_cache", "x") + "/cache";

  ir::Plan unknown_tensor = *plan;
  unknown_tensor.values[0].sub.tensor = 99999;
  const std::string bad = dir + "/unknown_tensor.json";
  ASSERT_TRUE(ir::SavePlanFile(unknown_tensor, bad).ok());
  Result r = Verify(bad, {"--cache", unusable_cache});
  EXPECT_EQ(r.code, kExitBadInput) << r.out << r.err;
  EXPECT_EQ(r.err, "loom verify: error: " + bad +
                       ": not a plan of the training step of 'gpt2' it records: value 0 (device "
                       "0, micro-batch 0): unknown tensor id 99999\n");
  EXPECT_EQ(r.out, "");

  ir::Plan cycle = *plan;
  ir::Task& task = cycle.tasks[3];
  ASSERT_FALSE(task.inputs.empty());
  ASSERT_FALSE(task.outputs.empty());
  task.inputs[0] = task.outputs[0];
  const std::string cyclic = dir + "/cycle.json";
  ASSERT_TRUE(ir::SavePlanFile(cycle, cyclic).ok());
  Result c = Verify(cyclic, {"--cache", unusable_cache});
  EXPECT_EQ(c.code, kExitBadInput) << c.out << c.err;
  EXPECT_EQ(Lines(c.err), 2) << c.err;
  EXPECT_TRUE(absl::StartsWith(c.err, "loom verify: warning: cannot create cache directory"))
      << c.err;
  EXPECT_TRUE(absl::StrContains(c.err, "\nloom verify: error: " + cyclic + ": ")) << c.err;
  EXPECT_TRUE(absl::StrContains(c.err, "dependency cycle")) << c.err;
  EXPECT_FALSE(absl::StrContains(c.err, "not a plan of")) << c.err;
}

// The default cache follows the XDG base directory rules.
TEST(VerifyCommandTest, DefaultCacheDirFollowsXdg) {
  struct Restore {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    Restore() {
      for (const char* name : {"XDG_CACHE_HOME", "HOME"}) {
        const char* v = std::getenv(name);
        saved.push_back({name, v == nullptr ? std::nullopt : std::optional<std::string>(v)});
      }
    }
    ~Restore() {
      for (const auto& [name, value] : saved) {
        if (value.has_value()) {
          setenv(name.c_str(), value->c_str(), 1);
        } else {
          unsetenv(name.c_str());
        }
      }
    }
  } restore;
  ASSERT_EQ(setenv("XDG_CACHE_HOME", "/x/cache", 1), 0);
  ASSERT_EQ(setenv("HOME", "/home/u", 1), 0);
  EXPECT_EQ(DefaultVerifyCacheDir(), "/x/cache/loom");
  ASSERT_EQ(setenv("XDG_CACHE_HOME", "relative", 1), 0);
  EXPECT_EQ(DefaultVerifyCacheDir(), "/home/u/.cache/loom");
  ASSERT_EQ(unsetenv("XDG_CACHE_HOME"), 0);
  EXPECT_EQ(DefaultVerifyCacheDir(), "/home/u/.cache/loom");
  ASSERT_EQ(unsetenv("HOME"), 0);
  EXPECT_EQ(DefaultVerifyCacheDir(), "");
}

}  // namespace
}  // namespace loom::tools
