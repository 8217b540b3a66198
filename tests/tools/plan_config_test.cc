// `loom plan --config`: a Megatron-style YAML configuration gives the plan its
// equivalent flags give.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "api/loom.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_test_util.h"

namespace loom::tools::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The Llama 3 70B example (tp8 pp4 dp16 vpp2, sequence parallel, distributed
// optimizer, bf16, global batch 128) plans exactly as the equivalent flags.
TEST(PlanConfigTest, Llama70bYamlGivesTheFlagsPlan) {
  const std::string yaml = std::string(LOOM_SOURCE_DIR) + "/examples/llama3-70b.yaml";
  const std::string from_yaml = ::testing::TempDir() + "plan_yaml.json";
  const std::string from_flags = ::testing::TempDir() + "plan_flags.json";
  Result a = RunCli({"plan", "--config", yaml, "-o", from_yaml});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  Result b = RunCli({"plan", "--model", "llama3-70b", "--layers", "80", "--seq", "8192", "--dp",
                     "16", "--tp", "8", "--pp", "4", "--vpp", "2", "--sp", "--zero", "1",
                     "--microbatches", "8", "--batch", "16", "--precision", "bf16", "-o",
                     from_flags});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_TRUE(absl::StrContains(a.out, "512 devices")) << a.out;
  const std::string x = Slurp(from_yaml), y = Slurp(from_flags);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "the plans differ (" << x.size() << " and " << y.size() << " bytes)";
}

// A configuration is never silently reinterpreted: a typo of a key Loom reads,
// a parallelism it does not model, a key given twice and a job size that
// disagrees with the parallel sizes are each one error naming the key.
TEST(PlanConfigTest, ConfigurationsAreNeverReinterpreted) {
  const std::string head = "loom_model: gpt2\ntiny: true\nnum_layers: 1\n";
  struct Case {
    std::string yaml, words;
  };
  for (const Case& c : {
           Case{head + "tensor_model_paralel_size: 2\n",
                "t.yaml:4:1: key 'tensor_model_paralel_size': unknown key (did you mean "
                "'tensor_model_parallel_size'?)"},
           Case{head + "tensor_model_parallel_size: 2\ncontext_parallel_size: 2\n",
                "key 'context_parallel_size': Loom does not model this parallelism"},
           Case{head + "num_layers: 2\n", "key 'num_layers': given twice (first at line 3)"},
           Case{"trainer: {devices: 4, num_nodes: 2}\n" + head +
                    "tensor_model_parallel_size: 2\ndata_parallel_size: 2\n",
                "(2 x 2 x 1) is not the job's 8 devices"},
       }) {
    auto config = ParseTrainConfig(c.yaml, "t.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_TRUE(absl::StrContains(config.status().message(), c.words)) << config.status();
  }
  // context_parallel_size 1 is no context parallelism; NeMo's job size is
  // trainer.devices x trainer.num_nodes.
  auto nemo = ParseTrainConfig("trainer: {devices: 4, num_nodes: 2}\n" + head +
                                   "tensor_model_parallel_size: 2\ncontext_parallel_size: 1\n",
                               "nemo.yaml");
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_EQ(nemo->parallel.dp, 4);
  EXPECT_EQ(nemo->parallel.tp, 2);
}

// NeMo nests the keys under `model:`, and world_size stands for the dp size.
TEST(PlanConfigTest, NestedKeysAndWorldSize) {
  auto flat = ParseTrainConfig(R"(
loom_model: llama3-8b
tensor_model_parallel_size: 2
pipeline_model_parallel_size: 2
data_parallel_size: 2
micro_batch_size: 2
global_batch_size: 16
recompute_granularity: full
)", "flat.yaml");
  auto nested = ParseTrainConfig(R"(
trainer: {devices: 8}
model:
  name: llama3-8b
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  world_size: 8
  micro_batch_size: 2
  global_batch_size: 16
  recompute_granularity: full
)", "nested.yaml");
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_TRUE(nested.ok()) << nested.status();
  for (const TrainConfig* c : {&*flat, &*nested}) {
    EXPECT_EQ(c->model.name, "llama3-8b");
    EXPECT_EQ(c->parallel.dp, 2);
    EXPECT_EQ(c->parallel.tp, 2);
    EXPECT_EQ(c->parallel.pp, 2);
    EXPECT_EQ(c->parallel.microbatches, 4);  // 16 / (2 x 2)
    EXPECT_EQ(c->model.batch, 4);            // 2 per replica x 2 replicas
    EXPECT_TRUE(c->parallel.recompute);
  }
}

// Bad configurations are errors naming the file, the place and the key.
TEST(PlanConfigTest, BadConfigurationsNameTheKey) {
  struct Bad {
    std::string yaml;
    std::string expect;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"loom_model: gpt2\ntensor_model_parallel_size: eight\n",
            "c.yaml:2:29: key 'tensor_model_parallel_size': expected an integer"},
           {"loom_model: gpt2\ndata_parallel_size: 2\nmicro_batch_size: 3\nglobal_batch_size: 8\n",
            "global_batch_size 8 is not a multiple"},
           {"loom_model: gpt2\nrecompute_granularity: selective\n", "'selective'"},
           {"loom_model: gpt2\nsequence_parallel: maybe\n", "expected true or false"},
           {"[1, 2]\n", "a training configuration is a map"},
           {"loom_model: gpt2\n  bad: indent: here\n", "c.yaml:"},
       }) {
    auto c = ParseTrainConfig(bad.yaml, "c.yaml");
    ASSERT_FALSE(c.ok()) << bad.yaml;
    EXPECT_TRUE(absl::StrContains(c.status().message(), bad.expect)) << c.status();
  }
}

// Parallel flags beside --config are refused; model flags override the file.
TEST(PlanConfigTest, FlagsBesideTheConfig) {
  const std::string yaml = WriteTemp("small.yaml",
                                     "loom_model: llama3-8b\ntensor_model_parallel_size: 2\n");
  const std::string out = ::testing::TempDir() + "small_plan.json";
  Result both = RunCli({"plan", "--config", yaml, "--tp", "4", "-o", out});
  EXPECT_EQ(both.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(both.err, "--tp given beside --config")) << both.err;
  Result tiny = RunCli({"plan", "--config", yaml, "--tiny", "--layers", "2", "-o", out});
  EXPECT_EQ(tiny.code, kExitOk) << tiny.err;
  EXPECT_TRUE(absl::StrContains(tiny.out, "2 devices")) << tiny.out;
}

}  // namespace
}  // namespace loom::tools::testing
