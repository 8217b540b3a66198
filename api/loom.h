#ifndef LOOM_API_LOOM_H_
#define LOOM_API_LOOM_H_

// Loom's library interface for training launchers: one header, the same steps as
// the command line. Build a model's training step, make a plan from a parallel
// configuration (flags-like fields, or a Megatron-style YAML file), search its
// pipeline schedule, verify it, run it. Errors are absl::Status values whose
// messages are the command line's.
//
// The functions and the config structs below are the stable surface; the IR,
// plan and report types they return (ir::Graph, ir::Plan, verify::VerifyReport,
// exec::TrainReport) are documented in docs/formats.md and their headers.
//
//   loom::ModelConfig model{.name = "llama3-8b", .tiny = true, .layers = 2};
//   loom::ParallelConfig parallel{.dp = 2, .tp = 2, .pp = 2, .microbatches = 4};
//   auto step = loom::BuildStep(model, parallel);
//   auto plan = loom::MakePlan(*step, parallel);
//   auto search = loom::SearchSchedule(*step, *plan);      // orders *plan
//   auto report = loom::VerifyPlan(*step, *plan);          // report->verdict

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exec/training.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "transform/strategy.h"
#include "verify/verify.h"

namespace loom {

inline constexpr const char* kApiVersion = "0.1";

struct ModelConfig {
  std::string name;    // a model of ListModels(): "llama3-8b"
  bool tiny = false;   // same structure, small dims
  int layers = 0;      // 0: the configuration's
  int64_t batch = 0;   // sequences per micro-batch over all replicas; 0: the dp size
  int64_t seq = 0;     // tokens per sequence; 0: the configuration's
  // kBf16: Megatron-LM's --bf16 step (bf16 parameters and activations; f32 main
  // gradients, master weights and Adam moments; ir::BuildTrainingStep).
  ir::Precision precision = ir::Precision::kFp32;
  // Global gradient-norm clipping threshold (Megatron-LM's --clip-grad); 0: none.
  double max_grad_norm = 1.0;
};

struct ParallelConfig {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int vpp = 1;        // virtual stages per pipeline stage
  int ep = 1;         // expert parallelism, within the dp replicas
  int cp = 1;         // context parallelism
  // The sequence in 2 * cp load-balanced chunks (Megatron-LM's), else cp contiguous.
  bool cp_balanced = true;
  bool sp = false;    // sequence parallelism over the tp group
  int zero = 0;       // ZeRO stage over the dp group (distributed optimizer: 1)
  int microbatches = 1;
  bool recompute = false;  // whole-layer activation recomputation
  bool factored = true;    // one scale unit plus replication rules
};

// Both halves of a launcher's training configuration.
// An architecture key of a training configuration (hidden_size, num_query_groups,
// ...), as written, until it is checked against the zoo model (CheckArchitecture).
struct ArchitectureSetting {
  std::string key;      // Megatron-LM's name, underscores: "num_query_groups"
  std::string spelled;  // as written: "--num-query-groups"
  std::string value;    // "8"; "true" for a bare switch
  std::string where;    // "args.txt: argument 12", "t.yaml:4:1"
};

struct TrainConfig {
  ModelConfig model;
  ParallelConfig parallel;
  // The configuration's keys that do not shape the step (learning rates, data,
  // logging, architecture settings the zoo model does not encode), as written:
  // named, so that none is dropped silently.
  std::vector<std::string> ignored;
  // The keys it read, by Megatron-LM's names ("clip_grad", "tensor_model_parallel_size"),
  // architecture keys that agree with the zoo model included.
  std::vector<std::string> read;
  // Architecture keys not yet checked: the readers check them when the configuration
  // names its model; otherwise they wait for CheckArchitecture.
  std::vector<ArchitectureSetting> architecture;
  // The architecture keys that agree with the zoo model, as written.
  std::vector<std::string> architecture_agreed;
};

// Checks the configuration's architecture keys against the zoo model it names
// (models::PublishedArchitecture; the full-size model, also for a tiny plan): a
// key that agrees is read, one the model does not encode (max_position_embeddings)
// is named as ignored, one that disagrees is InvalidArgument naming the place, both
// values and the model, since the plan would be of another model than the job's.
// Moves every entry of `config.architecture` to `read` or `ignored`; an unnamed
// model with architecture keys left is InvalidArgument.
absl::Status CheckArchitecture(TrainConfig& config);

// Reads a Megatron-style YAML training configuration (docs/python.md lists the
// keys): tensor/pipeline/data/expert parallel sizes, virtual pipeline size,
// sequence_parallel, micro_batch_size and global_batch_size, recompute
// settings, use_distributed_optimizer, num_layers, seq_length, bf16 (fp16: true
// is refused: not supported), clip_grad, NeMo's trainer.precision, and the Loom
// model name (`loom_model`, or a string `model`). Keys may sit at the top level,
// under a `model:` map, as NeMo writes them, or under `MODEL_ARGS:`, and be spelled
// with underscores or dashes (`tensor-model-parallel-size`, `--bf16`) as
// Megatron-LM's own YAML files spell them. Every key is accounted for
// (api/config_settings.h): read, refused when Loom does not model it, named in
// TrainConfig::ignored when it does not shape the step; an unknown key whose name
// speaks of a plan's shape is refused with the key it resembles. A key of the
// wrong type, an inconsistent batch or conflicting precisions is an error naming
// the file, line and key.
absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& yaml, const std::string& origin);
// A YAML file, or a DeepSpeed JSON file (by its .json name).
absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);

// A Megatron-LM command line, as pretrain_gpt.py is launched: its arguments
// (`--tensor-model-parallel-size 8 --bf16 ...`), optionally after the launcher
// (`torchrun --nproc_per_node 8 --nnodes 64 pretrain_gpt.py ...`, whose sizes give
// the job's devices); a `--deepspeed_config FILE` it names is read too
// (Megatron-DeepSpeed). Quotes and backslash line continuations as a shell reads
// them; lines starting with # are comments.
absl::StatusOr<TrainConfig> ParseMegatronArgs(const std::string& args, const std::string& origin);
absl::StatusOr<TrainConfig> LoadMegatronArgs(const std::string& path);

// A DeepSpeed JSON configuration: train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps (the data-parallel size is what they leave),
// zero_optimization.stage, bf16.enabled, fp16.enabled (refused), gradient_clipping
// (DeepSpeed's default: none), optimizer.type, pipeline.stages,
// tensor_parallel.autotp_size. The model is not in the file: give it (--model).
absl::StatusOr<TrainConfig> ParseDeepSpeedConfig(const std::string& json,
                                                 const std::string& origin);

// The model zoo's names, in order.
std::vector<std::string> ListModels();

// The whole training step (forward, backward, accumulation over the config's
// micro-batches, clipping, AdamW) of `model`, in `model.precision`.
absl::StatusOr<ir::Graph> BuildStep(const ModelConfig& model, const ParallelConfig& parallel);

// The distributed plan of `step` under `parallel`.
absl::StatusOr<ir::Plan> MakePlan(const ir::Graph& step, const ParallelConfig& parallel);

// What `model` under `parallel` builds, as a plan records it (ir::PlanStepSource:
// sizes as built, the micro-batches, the optimizer and clipping).
absl::StatusOr<ir::PlanStepSource> StepSourceOf(const ModelConfig& model,
                                                const ParallelConfig& parallel);
// The training step a source describes (BuildStep of the same configuration): the
// zoo model's forward at the source's sizes (0: the configuration's), its backward,
// accumulation over its micro-batches, clipping and its optimizer, in its precision.
// The command line builds its steps here too (`loom show`, `loom graph`, and the
// commands reading a plan). `dtype`, when given, is the dtype of every tensor of an
// fp32 step instead of f32 (`loom show --dtype f64`); a plan records the precision,
// never such a dtype.
absl::StatusOr<ir::Graph> BuildStep(const ir::PlanStepSource& source,
                                    std::optional<ir::DType> dtype = std::nullopt);
// The forward graph of that step alone: no backward, no optimizer (`loom show
// --forward`).
absl::StatusOr<ir::Graph> BuildForward(const ir::PlanStepSource& source,
                                       std::optional<ir::DType> dtype = std::nullopt);
// The plan of `model` under `parallel`, carrying its step: every later step
// (search, verify, run) rebuilds the step from the plan alone.
absl::StatusOr<ir::Plan> MakePlan(const ModelConfig& model, const ParallelConfig& parallel);
// The step a plan records (BuildStep of plan.step); FailedPrecondition naming the
// plan's model when it records none (a plan written before steps were recorded).
absl::StatusOr<ir::Graph> StepOfPlan(const ir::Plan& plan);

// The transform's strategy for `parallel` (what MakePlan plans with).
transform::Strategy StrategyOf(const ParallelConfig& parallel);

absl::StatusOr<ir::Plan> LoadPlan(const std::string& path);
absl::Status SavePlan(const ir::Plan& plan, const std::string& path);

struct SearchConfig {
  int64_t node_limit = 2'000'000;  // deterministic search budget
  double time_limit_seconds = 0;   // 0: none
  std::optional<int64_t> memory_cap;  // per device, in the block model's units
  // "makespan" (one iteration alone) or "span" (iterations back to back without a
  // barrier: the longest device's first start to last end).
  std::string objective = "makespan";
};

struct SearchSummary {
  std::string schedule;               // "search", a published name, "list/<rule>",
                                      // "inflight", "serial", "local" or "exact"
  std::string objective;              // what it was chosen by: "makespan" or "span"
  int64_t period = 0;                 // of the searched repetend
  int64_t period_lower_bound = 0;
  int64_t makespan = 0;
  int64_t makespan_lower_bound = 0;
  bool makespan_optimal = false;      // proved (makespan_proof says how)
  std::string makespan_proof;         // empty when not proved
  int64_t span = 0;                   // longest device's first start to last end
  int64_t span_lower_bound = 0;       // the most work on one device
  bool span_optimal = false;          // proved: the span meets its lower bound
  double bubble = 0;                  // idle share over all devices of the makespan
  double span_bubble = 0;             // idle share over all devices of the span
  std::vector<int64_t> peak_memory;   // per pipeline rank, block-model units
  double seconds = 0;
  std::string svg;                    // the schedule's Gantt chart
};

// Searches the pipeline order of `plan` (a repetend, warm-up and cool-down) and
// writes it into `plan` (which becomes explicit).
absl::StatusOr<SearchSummary> SearchSchedule(const ir::Graph& step, ir::Plan& plan,
                                             const SearchConfig& config = {});

struct VerifyConfig {
  std::string cache_dir;             // empty: no proof cache
  unsigned solver_timeout_ms = 10000;
  std::optional<int64_t> memory_capacity_bytes;
  int threads = 0;                   // 0: every core
  // Called on the calling thread about ten times a second while the partition laws
  // are proved, and once when they are done (`loom verify`'s progress line).
  std::function<void(const verify::Progress&)> progress;
};

// Proves `plan` equivalent to `step` (exit code of the verdict: verify::ExitCode).
// The plan is checked against the step on the way in, once (ir::ValidatePlan's
// checks, which verify::Verify runs before it derives anything): a plan that is not
// a plan of `step` is InvalidArgument naming the item ("plan: task 3 ...").
absl::StatusOr<verify::VerifyReport> VerifyPlan(const ir::Graph& step, const ir::Plan& plan,
                                                const VerifyConfig& config = {});
// The report as `loom verify --report` writes it (docs/formats.md).
std::string VerifyReportJson(const verify::VerifyReport& report, const std::string& model,
                             const std::string& plan_path);

struct RunConfig {
  std::string backend = "cpu";  // or "cuda"
  int steps = 1;
  bool fp64 = false;
  bool check = false;
  uint64_t seed = 1;
  std::string data_path;
  double collective_timeout_s = 60;
};

// Runs `plan`'s training steps (exec/training.h).
absl::StatusOr<exec::TrainReport> RunPlan(const ir::Graph& step, const ir::Plan& plan,
                                          const RunConfig& config = {});

}  // namespace loom

#endif  // LOOM_API_LOOM_H_
