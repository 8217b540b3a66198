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
           Case{head + "tensor_model_parallel_size: 2\ncontext_parallel_size: 2\n"
                       "cp_comm_type: a2a\n",
                "key 'cp_comm_type': Loom does not model a context-parallel exchange other "
                "than keys and values all-gathered or passed around a ring"},
           Case{head + "num_layers: 2\n", "t.yaml:4:1: key 'num_layers': given twice (first at t.yaml:3:1 as 'num_layers': 1)"},
           Case{"trainer: {devices: 4, num_nodes: 2}\n" + head +
                    "tensor_model_parallel_size: 2\ndata_parallel_size: 2\n",
                "(2 x 1 x 2 x 1) is not the job's 8 devices"},
       }) {
    auto config = ParseTrainConfig(c.yaml, "t.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_TRUE(absl::StrContains(config.status().message(), c.words)) << config.status();
  }
  // NeMo's job size is trainer.devices x trainer.num_nodes: dp x cp x tp x pp of it.
  auto nemo = ParseTrainConfig("trainer: {devices: 4, num_nodes: 2}\n" + head +
                                   "tensor_model_parallel_size: 2\ncontext_parallel_size: 1\n",
                               "nemo.yaml");
  ASSERT_TRUE(nemo.ok()) << nemo.status();
  EXPECT_EQ(nemo->parallel.dp, 4);
  EXPECT_EQ(nemo->parallel.tp, 2);
  EXPECT_EQ(nemo->parallel.cp, 1);
  auto cp = ParseTrainConfig("trainer: {devices: 4, num_nodes: 2}\n" + head +
                                 "tensor_model_parallel_size: 2\ncontext_parallel_size: 2\n",
                             "nemo.yaml");
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_EQ(cp->parallel.dp, 2);
  EXPECT_EQ(cp->parallel.cp, 2);
}

// A configuration's architecture is the zoo model's or an error: the plan would
// otherwise be of another model than the job's.
// Megatron-LM's context-parallel exchange: p2p (its default, written or not) and
// all_gather give one plan, keys and values all-gathered, and `loom plan` says how
// it exchanges them; --cp-contiguous beside a configuration keeps its meaning.
TEST(PlanConfigTest, ContextParallelExchangeIsStated) {
  const std::string head =
      "loom_model: llama3-8b\ntiny: true\nnum_layers: 2\ncontext_parallel_size: 2\n";
  std::string plans[3];
  int i = 0;
  for (const std::string& exchange : {std::string(""), std::string("cp_comm_type: p2p\n"),
                                      std::string("cp_comm_type: all_gather\n")}) {
    const std::string yaml = ::testing::TempDir() + "cp.yaml";
    std::ofstream(yaml) << head << exchange;
    const std::string out = ::testing::TempDir() + "cp_plan.json";
    Result r = RunCli({"plan", "--config", yaml, "-o", out});
    ASSERT_EQ(r.code, kExitOk) << exchange << r.err;
    EXPECT_TRUE(absl::StrContains(
        r.out, "context:      the sequence in 4 load-balanced chunks (rank r holds chunks r "
               "and 3-r); keys and values all-gathered over cp (Megatron-LM's cp_comm_type "
               "all_gather; p2p, its default, passes the same chunks around a ring"))
        << r.out;
    plans[i++] = Slurp(out);
  }
  EXPECT_FALSE(plans[0].empty());
  EXPECT_TRUE(plans[0] == plans[1] && plans[1] == plans[2]);
  const std::string yaml = ::testing::TempDir() + "cp.yaml";
  std::ofstream(yaml) << head;
  Result contiguous = RunCli({"plan", "--config", yaml, "--cp-contiguous", "-o",
                              ::testing::TempDir() + "cp_plan.json"});
  ASSERT_EQ(contiguous.code, kExitOk) << contiguous.err;
  EXPECT_TRUE(absl::StrContains(contiguous.out, "the sequence in 2 contiguous chunks"))
      << contiguous.out;
  Result alone = RunCli({"plan", "--model", "gpt2", "--tiny", "--cp-contiguous", "-o",
                         ::testing::TempDir() + "cp_plan.json"});
  EXPECT_EQ(alone.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(alone.err, "--cp-contiguous needs a context-parallel degree"))
      << alone.err;
}

TEST(PlanConfigTest, TheArchitectureIsCheckedAgainstTheModel) {
  const std::string head = "loom_model: llama3-70b\nnum_layers: 2\n";
  auto agrees = ParseTrainConfig(head + "hidden_size: 8192\nnum-query-groups: 8\n"
                                        "norm_epsilon: 0.00001\nnormalization: rmsnorm\n"
                                        "swiglu: true\nrotary_base: 5e5\n"
                                        "max_position_embeddings: 131072\n",
                                 "a.yaml");
  ASSERT_TRUE(agrees.ok()) << agrees.status();
  EXPECT_EQ(agrees->architecture_agreed,
            (std::vector<std::string>{"hidden_size", "num-query-groups", "norm_epsilon",
                                      "normalization", "swiglu", "rotary_base"}));
  // Not encoded by the graph (its positions are the sequence's): named as ignored.
  EXPECT_EQ(agrees->ignored, (std::vector<std::string>{"max_position_embeddings"}));
  for (const auto& [yaml, words] : std::vector<std::pair<std::string, std::string>>{
           {head + "hidden_size: 4096\n",
            "b.yaml:3:1: key 'hidden_size': 4096 disagrees with llama3-70b, whose hidden_size "
            "is 8192"},
           {head + "num_query_groups: 64\n", "whose num_query_groups is 8"},
           {head + "swiglu: false\n", "whose swiglu is true"},
           {head + "normalization: LayerNorm\n", "whose normalization is RMSNorm"},
           {"loom_model: deepseek-v3-671b\nnum_experts: 64\n", "whose num_experts is 256"},
       }) {
    auto config = ParseTrainConfig(yaml, "b.yaml");
    ASSERT_FALSE(config.ok()) << yaml;
    EXPECT_TRUE(absl::StrContains(config.status().message(), words)) << config.status();
  }
  // A command line names no model: checked when it is given, refused without one.
  const std::string out = ::testing::TempDir() + "arch_plan.json";
  Result wrong = RunCli({"plan", "--megatron-args", "--hidden-size 4096 --num-layers 2",
                         "--model", "llama3-70b", "-o", out});
  EXPECT_EQ(wrong.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(wrong.err, "--megatron-args: argument 1: key '--hidden-size': "
                                           "4096 disagrees with llama3-70b"))
      << wrong.err;
  Result right = RunCli({"plan", "--megatron-args", "--hidden-size 4096 --num-layers 2",
                         "--model", "llama3-8b", "-o", out});
  EXPECT_EQ(right.code, kExitOk) << right.err;
  EXPECT_TRUE(absl::StrContains(right.out, "architecture: 1 setting checked, as llama3-8b has "
                                           "them: --hidden-size")) << right.out;
  TrainConfig unnamed = *ParseMegatronArgs("--hidden-size 4096", "args");
  absl::Status status = CheckArchitecture(unnamed);
  EXPECT_TRUE(absl::StrContains(status.message(), "names no model to check it against"))
      << status;
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
            "c.yaml:2:1: key 'tensor_model_parallel_size': expected an integer, got 'eight'"},
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

// Megatron-LM's own spellings: hyphens (as its argument names), and its test
// configurations' `MODEL_ARGS:` map of `--name: value` keys, read as underscores.
TEST(PlanConfigTest, MegatronSpellingsAreOneKey) {
  const std::string underscores =
      "loom_model: llama3-8b\ntensor_model_parallel_size: 8\npipeline_model_parallel_size: 4\n"
      "data_parallel_size: 2\nsequence_parallel: true\nmicro_batch_size: 1\n"
      "global_batch_size: 16\nuse_distributed_optimizer: true\nbf16: true\nclip_grad: 0.5\n";
  const std::string hyphens =
      "loom_model: llama3-8b\ntensor-model-parallel-size: 8\npipeline-model-parallel-size: 4\n"
      "data-parallel-size: 2\nsequence-parallel: true\nmicro-batch-size: 1\n"
      "global-batch-size: 16\nuse-distributed-optimizer: true\nbf16: true\nclip-grad: 0.5\n";
  const std::string model_args =
      "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n  --tensor-model-parallel-size: 8\n"
      "  --pipeline-model-parallel-size: 4\n  --sequence-parallel: true\n  --micro-batch-size: 1\n"
      "  --global-batch-size: 16\n  --use-distributed-optimizer: true\n  --bf16: true\n"
      "  --clip-grad: 0.5\n  --lr: 3.0e-4\n  --data-path: $DATA_BLEND\n"
      "loom_model: llama3-8b\ndata_parallel_size: 2\n";
  auto a = ParseTrainConfig(underscores, "a.yaml");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->parallel.tp, 8);
  EXPECT_EQ(a->parallel.pp, 4);
  EXPECT_EQ(a->parallel.microbatches, 8);
  EXPECT_EQ(a->model.max_grad_norm, 0.5);
  for (const std::string& yaml : {hyphens, model_args}) {
    auto b = ParseTrainConfig(yaml, "b.yaml");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->parallel.tp, a->parallel.tp);
    EXPECT_EQ(b->parallel.pp, a->parallel.pp);
    EXPECT_EQ(b->parallel.dp, a->parallel.dp);
    EXPECT_EQ(b->parallel.sp, a->parallel.sp);
    EXPECT_EQ(b->parallel.zero, a->parallel.zero);
    EXPECT_EQ(b->parallel.microbatches, a->parallel.microbatches);
    EXPECT_EQ(b->model.batch, a->model.batch);
    EXPECT_EQ(b->model.precision, a->model.precision);
    EXPECT_EQ(b->model.max_grad_norm, a->model.max_grad_norm);
  }
  auto c = ParseTrainConfig(model_args, "c.yaml");
  ASSERT_TRUE(c.ok());
  // What does not shape the step is named, not dropped.
  EXPECT_EQ(c->ignored, (std::vector<std::string>{"ENV_VARS.CUDA_DEVICE_MAX_CONNECTIONS", "--lr",
                                                  "--data-path"}));
}

// The Llama 3 70B launch as Megatron-LM's command line (torchrun and
// pretrain_gpt.py's arguments) gives the plan of the YAML file and of the flags.
TEST(PlanConfigTest, MegatronCommandLineGivesTheFlagsPlan) {
  const std::string args = std::string(LOOM_SOURCE_DIR) + "/examples/llama3-70b.megatron-args";
  const std::string yaml = std::string(LOOM_SOURCE_DIR) + "/examples/llama3-70b.yaml";
  const std::string from_args = ::testing::TempDir() + "plan_args.json";
  const std::string from_yaml = ::testing::TempDir() + "plan_yaml2.json";
  Result a = RunCli({"plan", "--megatron-args", "@" + args, "--model", "llama3-70b", "-o",
                     from_args});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  EXPECT_TRUE(absl::StrContains(a.out, "dp16 tp8 pp4 vpp2 sp zero1 mb8")) << a.out;
  EXPECT_TRUE(absl::StrContains(a.out, "architecture: 14 settings checked, as llama3-70b has "
                                       "them: --hidden-size, --ffn-hidden-size")) << a.out;
  EXPECT_TRUE(absl::StrContains(a.out, "ignored:      24 settings")) << a.out;
  Result b = RunCli({"plan", "--config", yaml, "-o", from_yaml});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_EQ(Slurp(from_args), Slurp(from_yaml));
  // The same arguments given inline, without the launcher: the job's size is not
  // known, so the data-parallel size comes from data_parallel_size... which
  // Megatron-LM does not take; a plain line plans one replica.
  auto inline_args = ParseMegatronArgs(
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 "
      "--micro-batch-size 2 --global-batch-size 8 --recompute-granularity full "
      "--recompute-method uniform --recompute-num-layers 1", "--megatron-args");
  ASSERT_TRUE(inline_args.ok()) << inline_args.status();
  EXPECT_EQ(inline_args->parallel.dp, 1);
  EXPECT_EQ(inline_args->parallel.microbatches, 4);
  EXPECT_TRUE(inline_args->parallel.recompute);
  EXPECT_EQ(inline_args->model.precision, ir::Precision::kBf16);
}

// DeepSpeed's ZeRO-3 JSON: the data-parallel size is what the batch sizes leave
// (64 = 2 per GPU x 4 accumulation steps x 8), stage 3, bf16, clipping 1.
TEST(PlanConfigTest, DeepSpeedZero3GivesTheFlagsPlan) {
  const std::string json = std::string(LOOM_SOURCE_DIR) + "/examples/deepspeed-zero3.json";
  const std::string from_json = ::testing::TempDir() + "plan_ds.json";
  const std::string from_flags = ::testing::TempDir() + "plan_ds_flags.json";
  Result a = RunCli({"plan", "--config", json, "--model", "llama3-8b", "--tiny", "-o", from_json});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  EXPECT_TRUE(absl::StrContains(a.out, "dp8 tp1 pp1 zero3 mb4")) << a.out;
  Result b = RunCli({"plan", "--model", "llama3-8b", "--tiny", "--dp", "8", "--zero", "3",
                     "--microbatches", "4", "--batch", "16", "--precision", "bf16", "-o",
                     from_flags});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_EQ(Slurp(from_json), Slurp(from_flags));
  // DeepSpeed clips nothing unless told to: without gradient_clipping the step
  // has no clipping, as DeepSpeed runs it.
  auto unclipped = ParseDeepSpeedConfig(
      R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
          "gradient_accumulation_steps": 1})", "ds.json");
  ASSERT_TRUE(unclipped.ok()) << unclipped.status();
  EXPECT_EQ(unclipped->model.max_grad_norm, 0);
  EXPECT_EQ(unclipped->parallel.dp, 8);
}

// Every reader is strict: a misspelt key that would shape the plan, a setting Loom
// does not model, a placeholder or a key of another framework is one error (exit
// 2) naming the file, the place and the key, with the key it resembles.
TEST(PlanConfigTest, EveryFormRefusesWhatItCannotRead) {
  struct Case {
    std::string form, text, words;
  };
  for (const Case& c : std::vector<Case>{
           {"yaml", "loom_model: gpt2\ntensor-model-paralel-size: 8\n",
            "y.yaml:2:1: key 'tensor-model-paralel-size': unknown key (did you mean "
            "'tensor_model_parallel_size'?)"},
           {"yaml", "loom_model: gpt2\nparallelism:\n  tensor_parallel_degree: 2\n",
            "key 'parallelism.tensor_parallel_degree': this is a torchtitan job configuration"},
           {"yaml", "loom_model: gpt2\nnum_layers_in_first_pipeline_stage: 3\n",
            "Loom does not model an uneven pipeline split"},
           {"yaml", "loom_model: gpt2\nmystery_parallel_width: 3\n",
            "key 'mystery_parallel_width': unknown key; it may shape the plan"},
           {"yaml", "loom_model: gpt2\nhidden_dropout: 0.1\n", "dropout is not modelled"},
           {"args", "--tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type a2a",
            "a.txt: argument 5: key '--cp-comm-type': Loom does not model a context-parallel "
            "exchange other than keys and values all-gathered or passed around a ring"},
           {"args", "--tensor-model-parallel-size $TP",
            "expected an integer, got '$TP' (a shell variable Loom cannot expand"},
           {"args", "--pipline-model-parallel-size 2",
            "unknown key (did you mean 'pipeline_model_parallel_size'?)"},
           {"args", "--fp16", "fp16 training (with loss scaling) is not supported"},
           {"args", "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
            "recomputing block groups of 2 layers is not modelled"},
           {"args", "8 --bf16", "argument 1: expected an option (--name), got '8'"},
           {"json", R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 1})",
            "key 'train_batch_size': 'auto' is filled in by the Hugging Face Trainer"},
           {"json", R"({"zero_optimisation": {"stage": 3}})",
            "key 'zero_optimisation.stage': unknown key"},
           {"json", R"({"sequence_parallel_size": 2})", "DeepSpeed-Ulysses sequence parallelism"},
           {"json", R"({"train_batch_size": 8, "gradient_accumulation_steps": 3,
                        "train_micro_batch_size_per_gpu": 1})",
            "the global batch 8 is not a multiple of the micro-batch size x accumulation steps"},
       }) {
    absl::StatusOr<TrainConfig> parsed =
        c.form == "yaml"   ? ParseTrainConfig(c.text, "y.yaml")
        : c.form == "args" ? ParseMegatronArgs(c.text, "a.txt")
                           : ParseDeepSpeedConfig(c.text, "d.json");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.words)) << parsed.status();
  }
  // On the command line: exit 2, one line.
  Result r = RunCli({"plan", "--megatron-args", "--tensor-model-parallel-size 2 --fp8-format hybrid",
                     "--model", "gpt2", "-o", ::testing::TempDir() + "fp8.json"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "fp8 training is not supported")) << r.err;
}

// A mistyped flag gets the flag it resembles; a flag given twice is refused.
TEST(PlanConfigTest, FlagTyposAndRepeats) {
  Result typo = RunCli({"plan", "--model", "gpt2", "--tp2", "-o", "x.json"});
  EXPECT_EQ(typo.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(typo.err, "unknown flag '--tp2' (did you mean '--tp'?)"))
      << typo.err;
  Result twice = RunCli({"plan", "--model", "gpt2", "--tp", "2", "--tp", "4", "-o", "x.json"});
  EXPECT_EQ(twice.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(twice.err, "flag '--tp' given twice")) << twice.err;
}

}  // namespace
}  // namespace loom::tools::testing
