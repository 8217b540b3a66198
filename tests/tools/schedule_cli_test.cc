#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "tools/cli.h"

namespace loom::tools {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = RunLoom(args, out, err);
  return {code, out.str(), err.str()};
}

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << content;
  return path;
}

// `loom search` prints the table of the issue's example and writes a schedule that
// `loom simulate` accepts with the same makespan.
TEST(ScheduleCliTest, SearchPrintsTableAndWritesSchedule) {
  const std::string path = ::testing::TempDir() + "mshape.sched.json";
  Result r = RunCli({"search", "--placement", "mshape", "--devices", "4", "--memory", "6",
                  "--microbatches", "128", "-o", path});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* line : {"period:       6 (optimal", "lower bound:  6", "makespan:     780",
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
  for (const char* key : {"period", "lower_bound", "makespan", "bubble_ratio", "peak_memory",
                          "search_seconds", "valid"}) {
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
                  "--memory", "8", "--microbatches", "16", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const ir::Json j = ir::Json::parse(r.out);
  EXPECT_EQ(j["period"], 6);  // two stages per device
  EXPECT_EQ(j["optimal"], true);
}

}  // namespace
}  // namespace loom::tools
