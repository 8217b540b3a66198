#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"
#include "ir/json_util.h"
#include "tools/cli.h"

namespace loom::tools {
namespace {

using testing::Lines;
using testing::Result;
using testing::RunCli;
using testing::WriteTemp;

// `loom search` prints the table of the issue's example and writes a schedule that
// `loom simulate` accepts with the same makespan.
TEST(ScheduleCliTest, SearchPrintsTableAndWritesSchedule) {
  const std::string path = ::testing::TempDir() + "mshape.sched.json";
  Result r = RunCli({"search", "--placement", "mshape", "--devices", "4", "--memory", "6",
                  "--microbatches", "128", "-o", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* line : {"schedule:     search", "period:       6 (proved optimal for a repetend",
                           "lower bound:  6", "makespan:     780",
                           "bubble:", "peak memory:", "search time:", "valid:        yes"}) {
    EXPECT_TRUE(absl::StrContains(r.out, line)) << line << "\n" << r.out;
  }
  Result sim = RunCli({"simulate", path});
  ASSERT_EQ(sim.code, kExitOk) << sim.err;
  EXPECT_TRUE(absl::StrContains(sim.out, "makespan:     780")) << sim.out;
  // A tighter cap makes the stored schedule invalid: exit 1 naming the rule.
  Result tight = RunCli({"simulate", path, "--memory", "3"});
  EXPECT_EQ(tight.code, kExitFailure);
  EXPECT_TRUE(absl::StrContains(tight.out, "valid:        no: memory: device 0")) << tight.out;
}

// `--json` gives the documented fields.
TEST(ScheduleCliTest, SearchJsonFields) {
  Result r = RunCli({"search", "--placement", "vshape", "--devices", "4", "--memory", "4",
                  "--microbatches", "128", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const ir::Json j = ir::Json::parse(r.out);
  for (const char* key : {"schedule", "period", "lower_bound", "period_optimal", "makespan",
                          "makespan_lower_bound", "makespan_optimal", "bubble_ratio",
                          "peak_memory", "candidates", "search_seconds", "valid"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["period"], 4);
  EXPECT_EQ(j["makespan"], 524);
  EXPECT_EQ(j["valid"], true);
}

// Invalid block models get one clear error line and exit 2.
TEST(ScheduleCliTest, InvalidBlockModelsExitTwo) {
  struct Case {
    std::string json;
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"({"devices": 2, "blocks": [{"name": "a", "devices": [0], "after": ["b"]},
                                     {"name": "b", "devices": [1], "after": ["a"]}]})",
       {}, "dependency cycle: 'a' -> 'b' -> 'a'"},
      {R"({"devices": 2, "blocks": [{"name": "a", "devices": [0]},
                                     {"name": "b", "devices": [7], "after": ["a"]}]})",
       {}, "block 'b' (index 1): device 7 does not exist (the model has 2 devices)"},
      {R"({"devices": 1, "blocks": [{"name": "f", "memory": 3, "devices": [0]},
                                     {"name": "b", "memory": -3, "devices": [0], "after": ["f"]}]})",
       {"--memory", "2"}, "memory cap 2 on device 0 is below what one micro-batch needs (3)"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string path = WriteTemp("bad" + std::to_string(i++) + ".blocks.json", c.json);
    std::vector<std::string> args = {"search", "--blocks", path, "--microbatches", "4"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    Result r = RunCli(args);
    EXPECT_EQ(r.code, kExitBadInput) << c.message;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, c.message)) << r.err;
  }
  Result r = RunCli({"search", "--placement", "zshape", "--devices", "4"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(r.err, "unknown placement 'zshape'")) << r.err;
  r = RunCli({"search", "--placement", "vshape"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(r.err, "missing --devices")) << r.err;
}

// A stage model from flags: Zero Bubble's costs reach the period F + B + W.
TEST(ScheduleCliTest, SearchStageModel) {
  Result r = RunCli({"search", "--stages", "8", "--devices", "4", "--costs", "1,1,1,0",
                  "--memory", "16", "--microbatches", "16", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const ir::Json j = ir::Json::parse(r.out);
  EXPECT_EQ(j["period"], 6);  // two stages per device
  EXPECT_EQ(j["period_optimal"], true);
  EXPECT_EQ(j["makespan_optimal"], j.contains("makespan_proof"));
  if (j["makespan"] == j["makespan_lower_bound"]) EXPECT_EQ(j["makespan_optimal"], true);
  // The predefined schedules this stage model admits were compared, and the one
  // returned is the shortest of them all.
  int64_t shortest = -1;
  bool interleaved = false;
  for (const ir::Json& c : j["candidates"]) {
    if (c["fits"] == true) {
      const int64_t m = c["makespan"].get<int64_t>();
      shortest = shortest < 0 ? m : std::min(shortest, m);
    }
    interleaved |= c["name"] == "interleaved_1f1b" && c["defined"] == true;
  }
  EXPECT_TRUE(interleaved) << r.out;
  EXPECT_EQ(j["makespan"], shortest) << r.out;
}

// A predefined schedule simulates, writes the Gantt chart, the trace and a torch
// CSV, and the CSV simulates back to the same makespan.
TEST(ScheduleCliTest, SimulatePredefinedWritesPicturesAndCsv) {
  const std::string dir = ::testing::TempDir();
  Result r = RunCli({"simulate", "--schedule", "1f1b", "--devices", "4", "--microbatches", "8",
                     "--gantt", dir + "1f1b.svg", "--trace", dir + "1f1b.trace.json", "--csv",
                     dir + "1f1b.csv"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  // (m + p - 1)(F + B) = 11 * 2.
  EXPECT_TRUE(absl::StrContains(r.out, "makespan:     22")) << r.out;
  auto svg = ir::ReadTextFile(dir + "1f1b.svg");
  ASSERT_TRUE(svg.ok());
  EXPECT_TRUE(absl::StartsWith(*svg, "<svg") || absl::StrContains(*svg, "<svg ")) << svg->substr(0, 80);
  auto trace = ir::ReadTextFile(dir + "1f1b.trace.json");
  ASSERT_TRUE(trace.ok());
  EXPECT_TRUE(ir::Json::parse(*trace).contains("traceEvents"));
  Result back = RunCli({"simulate", dir + "1f1b.csv", "--costs", "1,1"});
  ASSERT_EQ(back.code, kExitOk) << back.err;
  EXPECT_TRUE(absl::StrContains(back.out, "makespan:     22")) << back.out;
  Result bad = RunCli({"simulate", "--schedule", "zb_h9", "--devices", "4", "--microbatches", "8"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_EQ(Lines(bad.err), 1) << bad.err;
}

// The searched schedule's torch CSV lists each rank's actions with no idle steps
// and reads back to the same makespan.
TEST(ScheduleCliTest, SearchCsvReadsBackToTheSameSchedule) {
  const std::string csv = ::testing::TempDir() + "zb.csv";
  Result r = RunCli({"search", "--stages", "8", "--devices", "4", "--costs", "1,1,1,1",
                     "--memory", "12", "--microbatches", "8", "--json", "--csv", csv});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const ir::Json j = ir::Json::parse(r.out.substr(0, r.out.find("\nwrote")));
  auto text = ir::ReadTextFile(csv);
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(absl::StrContains(*text, ",,")) << *text;
  EXPECT_FALSE(absl::StrContains(*text, "\n,")) << *text;
  EXPECT_FALSE(absl::StartsWith(*text, ",")) << *text;
  EXPECT_FALSE(absl::StrContains(*text, ",\r")) << *text;
  // 8 stages on 4 ranks, 8 micro-batches, F, I and W each: 48 actions per rank.
  for (absl::string_view row : absl::StrSplit(*text, "\r\n", absl::SkipEmpty())) {
    EXPECT_EQ(std::count(row.begin(), row.end(), ',') + 1, 48) << row;
  }
  Result back = RunCli({"simulate", csv, "--costs", "1,1,1,1"});
  ASSERT_EQ(back.code, kExitOk) << back.err;
  EXPECT_TRUE(absl::StrContains(back.out, absl::StrCat("makespan:     ", j["makespan"].get<int64_t>())))
      << back.out << "\n" << r.out;
}

// A deadlocking torch CSV is reported with exit 1 and the cycle.
TEST(ScheduleCliTest, SimulateReportsDeadlock) {
  // Rank 0 waits for micro-batch 0's backward before sending micro-batch 1's
  // forward, which rank 1 wants first.
  const std::string path = WriteTemp("deadlock.csv",
                                     "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  Result r = RunCli({"simulate", path, "--costs", "1,1"});
  EXPECT_EQ(r.code, kExitFailure) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "valid:        no: deadlock on devices 0, 1")) << r.out;
}

// `--least-span` keeps a deadlock a broken rule (exit 1), as without it.
TEST(ScheduleCliTest, LeastSpanReportsDeadlockToo) {
  const std::string path = WriteTemp("deadlock_span.csv",
                                     "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  Result r = RunCli({"simulate", path, "--costs", "1,1", "--least-span"});
  EXPECT_EQ(r.code, kExitFailure) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "valid:        no: deadlock on devices 0, 1")) << r.out;
}

// `--objective span` chooses by the longest device span and says so; the schedule it
// writes, simulated with `--least-span`, has that span; an unknown objective exits 2.
TEST(ScheduleCliTest, SearchBySpan) {
  const std::string path = ::testing::TempDir() + "span.sched.json";
  Result r = RunCli({"search", "--stages", "4", "--devices", "4", "--costs", "3,3,2,1",
                     "--activation", "2,1", "--memory", "16", "--microbatches", "16",
                     "--objective", "span", "--json", "-o", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const ir::Json j = ir::Json::parse(r.out);
  EXPECT_EQ(j["objective"], "span");
  EXPECT_EQ(j["span_lower_bound"], 16 * 8);
  EXPECT_EQ(j["span_optimal"], j["span"] == j["span_lower_bound"]);
  for (const ir::Json& c : j["candidates"]) {
    if (c["fits"].get<bool>()) EXPECT_GE(c["span"].get<int64_t>(), j["span"].get<int64_t>());
  }
  Result sim = RunCli({"simulate", path, "--least-span", "--json"});
  ASSERT_EQ(sim.code, kExitOk) << sim.err;
  EXPECT_EQ(ir::Json::parse(sim.out)["span"], j["span"]);
  Result text = RunCli({"search", "--stages", "4", "--devices", "4", "--microbatches", "8",
                        "--objective", "span"});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  for (const char* line : {"objective:    span", "span:         ", "of the span",
                           "(span, makespan, peak memory)"}) {
    EXPECT_TRUE(absl::StrContains(text.out, line)) << line << "\n" << text.out;
  }
  Result bad = RunCli({"search", "--stages", "4", "--devices", "4", "--objective", "fastest"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(bad.err, "unknown objective 'fastest' (makespan or span)"))
      << bad.err;
}

// Blocks derived from a plan are searched and the order is written back into the
// plan, which then reads back with one program per device.
TEST(ScheduleCliTest, SearchPlanWritesTheOrderIntoThePlan) {
  const std::string dir = ::testing::TempDir();
  Result p = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--layers", "4", "--pp", "2",
                     "--tp", "2", "--microbatches", "4", "--explicit", "-o", dir + "p.json"});
  ASSERT_EQ(p.code, kExitOk) << p.err;
  Result r = RunCli({"search", "--plan", dir + "p.json", "--model", "llama3-8b", "--tiny",
                     "--layers", "4", "-o", dir + "p.ordered.json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "4 blocks on 2 devices, 4 micro-batches")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "(the plan with every device's order)")) << r.out;
  // A plan's memory is in bytes: the cap takes a unit, as verify's does, and the
  // figures say theirs.
  Result capped = RunCli({"search", "--plan", dir + "p.json", "--memory", "80GiB"});
  ASSERT_EQ(capped.code, kExitOk) << capped.err;
  EXPECT_TRUE(absl::StrContains(capped.out, "memory cap 81920 MiB")) << capped.out;
  EXPECT_TRUE(absl::StrContains(capped.out, " MiB\n")) << capped.out;
  Result bare = RunCli({"search", "--plan", dir + "p.json", "--memory", "20000"});
  EXPECT_EQ(bare.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(bare.err, "takes bytes with a unit (80GiB")) << bare.err;
  auto text = ir::ReadTextFile(dir + "p.ordered.json");
  ASSERT_TRUE(text.ok());
  const ir::Json j = ir::Json::parse(*text);
  ASSERT_TRUE(j.contains("order"));
  EXPECT_EQ(j["order"].size(), 4u);  // pp2 x tp2 devices
  // The plan carries the step it was made from: no model flag is needed, and one
  // that disagrees is refused.
  Result alone = RunCli({"search", "--plan", dir + "p.json"});
  EXPECT_EQ(alone.code, kExitOk) << alone.err;
  Result other = RunCli({"search", "--plan", dir + "p.json", "--model", "gpt2"});
  EXPECT_EQ(other.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(other.err, "--model gpt2 disagrees with the plan")) << other.err;
}

}  // namespace
}  // namespace loom::tools
