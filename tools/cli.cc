#include "tools/cli.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/autodiff.h"
#include "ir/graph_stats.h"
#include "ir/json_format.h"
#include "ir/op_schema.h"
#include "ir/plan_json.h"
#include "transform/parallelize.h"
#include "ir/text_format.h"
#include "models/models.h"
#include "tools/flags.h"
#include "tools/schedule_commands.h"
#include "tools/spec_flags.h"
#include "tools/terminal_status.h"
#include "api/loom.h"
#include "ir/status_macros.h"
#include "tools/run_command.h"
#include "tools/verify_command.h"

namespace loom::tools {
namespace {

constexpr char kVersion[] = "0.1.0";

// "8.03B", "124.4M", "12.0K".
std::string Compact(double n) {
  if (n >= 1e12) return absl::StrFormat("%.2fT", n / 1e12);
  if (n >= 1e9) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1e6) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrFormat("%.0f", n);
}

std::string Grouped(int64_t n) {
  std::string digits = absl::StrCat(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Bytes(double b) {
  if (b >= 1e12) return absl::StrFormat("%.2f TB", b / 1e12);
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.2f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.2f KB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

// Flags shared by commands that build a model.
void AddModelFlags(FlagSet& flags) {
  flags.AddString("--model", "NAME", "model to build (see 'loom models')");
  flags.AddString("--layers", "N", "number of layers (default: the configuration's)");
  flags.AddBool("--tiny", "build the model at a tiny size (same structure, small dims)");
  flags.AddString("--batch", "B", "sequences per micro-batch");
  flags.AddString("--seq", "S", "tokens per sequence");
  flags.AddString("--dtype", "T",
                  "parameter and activation dtype of an fp32 step: f32 (default), bf16, f16, f64 "
                  "(every tensor of the step in it)");
  flags.AddString("--precision", "P", kPrecisionHelp);
  flags.AddBool("--forward", "the forward graph only, not the whole training step");
  flags.AddString("--microbatches", "M", "micro-batches in the training step (default 1)");
  flags.AddString("--optimizer", "NAME", "adamw (default) or sgd");
  flags.AddString("--max-grad-norm", "X", kMaxGradNormHelp);
}

// Builds the graph a model flag set asks for: the training step unless --forward.
absl::StatusOr<ir::Graph> BuildModelGraph(const FlagSet& flags) {
  auto name = flags.GetString("--model");
  if (!name.has_value()) return absl::InvalidArgumentError("missing --model NAME");
  // Sizes left 0 are the model's own (batch: 1, or 2 at tiny size).
  ir::PlanStepSource source;
  source.model = *name;
  source.tiny = flags.GetBool("--tiny");
  LOOM_ASSIGN_OR_RETURN(int64_t layers, flags.GetInt("--layers", 0, 1, ir::kMaxLayers));
  source.layers = static_cast<int>(layers);
  LOOM_ASSIGN_OR_RETURN(source.batch, flags.GetInt("--batch", 0, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(source.seq, flags.GetInt("--seq", 0, 1, int64_t{1} << 30));
  LOOM_ASSIGN_OR_RETURN(source.training.precision, PrecisionFlag(flags));
  std::optional<ir::DType> dtype;
  if (auto text = flags.GetString("--dtype")) {
    auto parsed = ir::ParseDType(*text);
    if (!parsed.ok() || !ir::IsFloat(*parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag '--dtype' expects f32, f64, bf16 or f16, got '", *text, "'"));
    }
    const ir::DType own = ir::ModelDType(source.training.precision);
    if (flags.Has("--precision") && *parsed != own) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dtype ", *text, " conflicts with --precision ",
          ir::PrecisionName(source.training.precision), " (whose parameters are ",
          ir::DTypeName(own), "); give one of them"));
    }
    dtype = *parsed;
  }
  if (flags.GetBool("--forward")) return BuildForward(source, dtype);
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches,
                        flags.GetInt("--microbatches", 1, 1, ir::kMaxMicrobatches));
  source.training.microbatches = static_cast<int>(microbatches);
  LOOM_ASSIGN_OR_RETURN(source.training.max_grad_norm, MaxGradNorm(flags));
  if (auto opt = flags.GetString("--optimizer")) {
    auto kind = ir::ParseOptimizerKind(*opt);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag '--optimizer' expects adamw or sgd, got '", *opt, "'"));
    }
    source.training.optimizer = *kind;
  }
  return BuildStep(source, dtype);
}

using Command = std::function<int(const std::vector<std::string>&, std::ostream&, std::ostream&)>;

int CmdModels(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("models", "Lists the models Loom can build.");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  out << absl::StrFormat("%-22s %-10s %-12s %s\n", "model", "family", "published", "description");
  for (const auto& m : models::ListModels()) {
    out << absl::StrFormat("%-22s %-10s %-12s %s\n", m.name, m.family,
                           m.published_params > 0 ? Compact(m.published_params) : "-",
                           m.description);
  }
  return kExitOk;
}

int CmdOps(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("ops", "Lists the op kinds of the IR with their inputs, outputs and attributes,\n"
                       "and whether each has a gradient rule.");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    const ir::OpSchema& schema = ir::GetOpSchema(static_cast<ir::OpKind>(i));
    out << absl::StrFormat("%-20s %-5s %s\n", ir::OpKindName(schema.kind),
                           schema.grad != nullptr ? "grad" : "-", schema.doc);
  }
  return kExitOk;
}

void PrintSummary(const ir::Graph& g, double build_seconds, std::ostream& out) {
  const ir::GraphStats s = ir::ComputeStats(g);
  auto phase_ops = [&](ir::Phase p) {
    auto it = s.ops_by_phase.find(p);
    return it == s.ops_by_phase.end() ? int64_t{0} : it->second;
  };
  auto phase_flops = [&](ir::Phase p) {
    auto it = s.flops_by_phase.find(p);
    return it == s.flops_by_phase.end() ? 0.0 : it->second;
  };
  auto role_count = [&](ir::TensorRole r) {
    auto it = s.tensors_by_role.find(r);
    return it == s.tensors_by_role.end() ? int64_t{0} : it->second;
  };
  auto kind_count = [&](const char* kind) {
    auto it = s.ops_by_kind.find(kind);
    return it == s.ops_by_kind.end() ? int64_t{0} : it->second;
  };
  std::string what = "forward graph";
  if (phase_ops(ir::Phase::kBackward) > 0) {
    std::vector<std::string> parts = {
        absl::StrCat(std::max(s.num_microbatches, 1), " micro-batch",
                     s.num_microbatches > 1 ? "es" : "")};
    if (kind_count("adamw") > 0) parts.push_back("adamw");
    if (kind_count("sgd") > 0) parts.push_back("sgd");
    if (kind_count("clip_coef") > 0) parts.push_back("global grad-norm clipping");
    const bool masters = std::any_of(g.tensors().begin(), g.tensors().end(),
                                     [&](const ir::Tensor& t) {
                                       return ir::ParameterOfMaster(g, t.id).has_value();
                                     });
    if (masters) parts.push_back("bf16 mixed precision with f32 masters");
    what = absl::StrCat("training step (", absl::StrJoin(parts, ", "), ")");
  }
  out << "graph:        " << g.name() << ", " << what << "\n";
  out << "layers:       " << s.num_layers << "\n";
  out << "tensors:      " << s.num_tensors << " (inputs " << role_count(ir::TensorRole::kInput)
      << ", parameters " << role_count(ir::TensorRole::kParameter) << ", states "
      << role_count(ir::TensorRole::kOptimizerState) << ", activations "
      << role_count(ir::TensorRole::kActivation) << ", gradients "
      << role_count(ir::TensorRole::kGradient) << ", losses "
      << role_count(ir::TensorRole::kLoss) << ")\n";
  out << "ops:          " << s.num_ops << " (forward " << phase_ops(ir::Phase::kForward)
      << ", backward " << phase_ops(ir::Phase::kBackward) << ", optimizer "
      << phase_ops(ir::Phase::kOptimizer) << ")\n";
  out << "parameters:   " << Grouped(s.parameters) << " (" << Compact(s.parameters) << ", "
      << Bytes(static_cast<double>(s.parameter_bytes)) << ")\n";
  if (s.optimizer_state_bytes > 0) {
    out << "optimizer:    " << Bytes(static_cast<double>(s.optimizer_state_bytes))
        << " of state\n";
  }
  const double fwd = phase_flops(ir::Phase::kForward);
  const double train = fwd + phase_flops(ir::Phase::kBackward);
  if (s.tokens > 0) {
    out << "tokens:       " << Grouped(s.tokens) << "\n";
    out << absl::StrFormat("flops/token:  forward %.2f GFLOP, forward+backward %.2f GFLOP\n",
                           fwd / s.tokens / 1e9, train / s.tokens / 1e9);
  } else {
    out << absl::StrFormat("flops:        forward %.3g, forward+backward %.3g\n", fwd, train);
  }
  out << "op kinds:    ";
  int column = 0;
  for (const auto& [kind, count] : s.ops_by_kind) {
    if (column++ % 6 == 0) out << "\n ";
    out << " " << kind << " " << count;
  }
  out << "\n";
  out << absl::StrFormat("built in:     %.3f s\n", build_seconds);
}

int CmdShow(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("show", "Prints a summary of a model's training graph (or of a graph file):\n"
                        "ops, tensors, parameter count, FLOPs per token.");
  AddModelFlags(flags);
  flags.AddString("--graph", "FILE", "summarise a graph file (text or JSON) instead of a model");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ir::Graph> graph;
  if (auto file = flags.GetString("--graph")) {
    if (flags.Has("--model")) {
      return Fail(err, "show", absl::InvalidArgumentError("give --model or --graph, not both"));
    }
    graph = ir::LoadGraphFile(*file);
  } else {
    graph = BuildModelGraph(flags);
  }
  if (!graph.ok()) return Fail(err, "show", graph.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintSummary(*graph, seconds, out);
  return kExitOk;
}

int CmdGraph(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("graph", "Writes a model's training graph (or forward graph) as text IR or JSON.");
  AddModelFlags(flags);
  flags.AddString("--output", "FILE", "where to write ('-' or absent: standard output)");
  flags.AddAlias("-o", "--output");
  flags.AddString("--format", "FMT", "text or json (default: from the file name, else text)");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  std::string path = flags.GetString("--output").value_or("-");
  std::string format = flags.GetString("--format").value_or("");
  if (!format.empty() && format != "text" && format != "json") {
    return Fail(err, "graph", absl::InvalidArgumentError(absl::StrCat(
                                  "flag '--format' expects text or json, got '", format, "'")));
  }
  auto graph = BuildModelGraph(flags);
  if (!graph.ok()) return Fail(err, "graph", graph.status());
  if (path == "-") {
    out << (format == "json" ? ir::GraphToJson(*graph) : ir::PrintGraph(*graph));
    return kExitOk;
  }
  absl::Status s;
  if (format.empty()) {
    s = ir::SaveGraphFile(*graph, path);
  } else {
    // An explicit format wins over the file name: write through a temporary name
    // with the matching extension, then rename.
    const std::string tmp = path + (format == "json" ? ".tmp.json" : ".tmp.loom");
    s = ir::SaveGraphFile(*graph, tmp);
    if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      s = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
    }
  }
  if (!s.ok()) return Fail(err, "graph", s);
  out << "wrote " << path << " (" << graph->num_ops() << " ops, " << graph->num_tensors()
      << " tensors)\n";
  return kExitOk;
}

int CmdPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("plan",
                "Splits a model's training step over a dp x pp x cp x tp device mesh and writes\n"
                "the distributed plan (tasks, collectives, lineage of every value) as JSON.");
  flags.AddString("--model", "NAME", "model to build (see 'loom models')");
  flags.AddString("--layers", "N", "number of layers (default: the configuration's)");
  flags.AddBool("--tiny", "build the model at a tiny size");
  flags.AddString("--batch", "B", "sequences per micro-batch (default: dp)");
  flags.AddString("--seq", "S", "tokens per sequence");
  flags.AddString("--dp", "D", "data-parallel replicas (default 1)");
  flags.AddString("--tp", "T", "tensor-parallel degree (default 1)");
  flags.AddString("--pp", "P", "pipeline stages (default 1)");
  flags.AddString("--vpp", "V", "virtual stages per pipeline stage (default 1)");
  flags.AddBool("--sp", "sequence parallelism over the tensor-parallel group");
  flags.AddString("--ep", "E", "expert-parallel degree (default 1)");
  flags.AddString("--cp", "C",
                  "context-parallel degree: the sequence in 2C load-balanced chunks, rank r "
                  "holding chunks r and 2C-1-r, as Megatron-LM does (default 1)");
  flags.AddBool("--cp-contiguous", "with --cp C: the sequence in C contiguous chunks instead");
  flags.AddString("--zero", "Z", "ZeRO stage 0-3 over the data-parallel group (default 0)");
  flags.AddString("--microbatches", "M", "micro-batches per step (default 1)");
  flags.AddString("--max-grad-norm", "X", kMaxGradNormHelp);
  flags.AddString("--precision", "P", kPrecisionHelp);
  flags.AddBool("--recompute", "recompute each layer's forward before its backward");
  flags.AddBool("--explicit", "write every device and micro-batch (default: factored)");
  flags.AddString("--config", "FILE",
                  "a training configuration instead of the parallel flags: Megatron-LM or NeMo "
                  "YAML, or DeepSpeed JSON (*.json)");
  flags.AddString("--megatron-args", "ARGS",
                  "a Megatron-LM command line instead of the parallel flags ('--tensor-model-"
                  "parallel-size 8 ...', optionally after torchrun and its sizes), or @FILE "
                  "holding one");
  flags.AddString("--output", "FILE", "where to write the plan (JSON)");
  flags.AddAlias("-o", "--output");
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  TerminalStatus status("plan", err);
  auto fail = [&](const absl::Status& s) {
    status.Done();
    return Fail(err, "plan", s);
  };
  auto loaded = ConfigFromFlags(flags);
  if (!loaded.ok()) return fail(loaded.status());
  std::optional<TrainConfig> config = *std::move(loaded);
  auto name = config.has_value() ? std::optional<std::string>(config->model.name)
                                 : flags.GetString("--model");
  if (!name.has_value() || name->empty()) {
    return fail(absl::InvalidArgumentError("missing --model NAME"));
  }
  ParallelConfig parallel;
  struct IntFlag {
    const char* name;
    int* target;
    int64_t max;
  };
  for (const IntFlag& f : {IntFlag{"--dp", &parallel.dp, 1 << 20}, IntFlag{"--tp", &parallel.tp, 4096},
                           IntFlag{"--pp", &parallel.pp, 4096}, IntFlag{"--vpp", &parallel.vpp, 64},
                           IntFlag{"--zero", &parallel.zero, 3},
                           IntFlag{"--microbatches", &parallel.microbatches, ir::kMaxMicrobatches}}) {
    auto v = flags.GetInt(f.name, *f.target, f.name == std::string("--zero") ? 0 : 1, f.max);
    if (!v.ok()) return fail(v.status());
    *f.target = static_cast<int>(*v);
  }
  auto ep = flags.GetInt("--ep", 1, 1, 4096);
  if (!ep.ok()) return fail(ep.status());
  parallel.ep = static_cast<int>(*ep);
  auto cp = flags.GetInt("--cp", 1, 1, 4096);
  if (!cp.ok()) return fail(cp.status());
  parallel.cp = static_cast<int>(*cp);
  parallel.cp_balanced = !flags.GetBool("--cp-contiguous");
  parallel.sp = flags.GetBool("--sp");
  parallel.recompute = flags.GetBool("--recompute");
  parallel.factored = !flags.GetBool("--explicit");
  if (config.has_value()) {
    const bool factored = parallel.factored;
    const bool balanced = parallel.cp_balanced;
    parallel = config->parallel;
    parallel.factored = factored;
    parallel.cp_balanced = balanced;
  }
  if (!parallel.cp_balanced && parallel.cp < 2) {
    return fail(absl::InvalidArgumentError("--cp-contiguous needs a context-parallel degree of 2 "
                                           "or more"));
  }
  const transform::Strategy strategy = StrategyOf(parallel);
  ModelConfig model{.name = *name, .tiny = flags.GetBool("--tiny")};
  auto layers = flags.GetInt("--layers", 0, 1, ir::kMaxLayers);
  if (!layers.ok()) return fail(layers.status());
  model.layers = static_cast<int>(*layers);
  auto batch = flags.GetInt("--batch", parallel.dp, 1, int64_t{1} << 30);
  if (!batch.ok()) return fail(batch.status());
  model.batch = *batch;
  auto seq = flags.GetInt("--seq", 0, 1, int64_t{1} << 30);
  if (!seq.ok()) return fail(seq.status());
  model.seq = *seq;
  auto precision = PrecisionFlag(flags);
  if (!precision.ok()) return fail(precision.status());
  model.precision = *precision;
  if (config.has_value()) model = config->model;
  auto path = flags.GetString("--output");
  if (!path.has_value()) return fail(absl::InvalidArgumentError("missing -o FILE"));
  const auto start = std::chrono::steady_clock::now();
  auto max_grad_norm = MaxGradNorm(flags);
  if (!max_grad_norm.ok()) return fail(max_grad_norm.status());
  if (!config.has_value()) model.max_grad_norm = *max_grad_norm;
  // The plan records the step it was made from (sizes as built), so that the
  // commands reading it need no model flags.
  auto source = StepSourceOf(model, parallel);
  if (!source.ok()) return fail(source.status());
  status.Step(absl::StrCat("building the training step of ", *name));
  auto spec = BuildStep(*source);
  if (!spec.ok()) return fail(spec.status());
  std::vector<std::string> zero_whole;
  status.Step(absl::StrCat("splitting it over ",
                           int64_t{strategy.dp} * strategy.cp * strategy.tp * strategy.pp,
                           " devices"));
  auto plan = transform::Parallelize(*spec, strategy, &zero_whole);
  if (!plan.ok()) return fail(plan.status());
  plan->step = *source;
  status.Step(absl::StrCat("writing ", *path));
  absl::Status saved = ir::SavePlanFile(*plan, *path);
  if (!saved.ok()) return fail(saved);
  status.Done();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::map<std::string, int64_t> kinds;
  for (const ir::Collective& c : plan->collectives) ++kinds[std::string(ir::CollectiveKindName(c.kind))];
  std::vector<std::string> kind_text;
  for (const auto& [k, n] : kinds) kind_text.push_back(absl::StrCat(k, " ", n));
  out << "plan:         " << *name << ", " << strategy.ToString() << " on "
      << plan->mesh.ToString() << " (" << plan->mesh.num_devices() << " devices)\n";
  if (model.precision == ir::Precision::kBf16) {
    out << "precision:    bf16 (bf16 parameters and activations; f32 main gradients, master "
           "weights and Adam moments)\n";
  }
  out << "form:         "
      << (plan->is_factored() ? "factored (one scale unit, micro-batch 0, replication rules)"
                              : "explicit")
      << "\n";
  out << "tasks:        " << plan->tasks.size() << "\n";
  out << "collectives:  " << plan->collectives.size() << " (" << absl::StrJoin(kind_text, ", ")
      << ")\n";
  out << "values:       " << plan->values.size() << "\n";
  if (strategy.cp > 1) {
    // How the plan exchanges keys and values, stated: Megatron-LM's default (p2p)
    // runs the same values in another order.
    const int chunks = strategy.cp_balanced ? 2 * strategy.cp : strategy.cp;
    out << "context:      the sequence in " << chunks
        << (strategy.cp_balanced
                ? absl::StrCat(" load-balanced chunks (rank r holds chunks r and ", chunks - 1,
                               "-r)")
                : std::string(" contiguous chunks"))
        << "; keys and values all-gathered over cp (Megatron-LM's cp_comm_type all_gather; "
           "p2p, its default, passes the same chunks around a ring: the same values, another "
           "timing)\n";
  }
  if (!zero_whole.empty()) {
    // Never silently: ZeRO asked for, and these parameters not sharded.
    const size_t shown = std::min<size_t>(zero_whole.size(), 4);
    int64_t parameters = 0;
    for (const ir::Tensor& t : spec->tensors()) parameters += t.role == ir::TensorRole::kParameter;
    out << "zero:         " << zero_whole.size() << " of " << parameters
        << " parameters left whole over dp " << strategy.dp
        << " (no dim that tensor parallelism leaves whole divides by " << strategy.dp
        << "; all-reduced, updated on every replica): "
        << absl::StrJoin(zero_whole.begin(), zero_whole.begin() + shown, ", ")
        << (zero_whole.size() > shown ? ", ..." : "") << "\n";
  }
  if (config.has_value() && !config->architecture_agreed.empty()) {
    const std::vector<std::string>& agreed = config->architecture_agreed;
    const size_t shown = std::min<size_t>(agreed.size(), 8);
    out << "architecture: " << agreed.size() << " setting" << (agreed.size() == 1 ? "" : "s")
        << " checked, as " << *name << " has them: "
        << absl::StrJoin(agreed.begin(), agreed.begin() + shown, ", ")
        << (agreed.size() > shown ? ", ..." : "") << "\n";
  }
  if (config.has_value() && !config->ignored.empty()) {
    // Named, never dropped silently: what the configuration sets that does not
    // shape the step.
    const size_t shown = std::min<size_t>(config->ignored.size(), 8);
    out << "ignored:      " << config->ignored.size() << " setting"
        << (config->ignored.size() == 1 ? "" : "s")
        << " that do not shape the step: "
        << absl::StrJoin(config->ignored.begin(), config->ignored.begin() + shown, ", ")
        << (config->ignored.size() > shown ? ", ..." : "") << "\n";
  }
  out << absl::StrFormat("built in:     %.2f s\n", seconds);
  out << "wrote " << *path << "\n";
  return kExitOk;
}

const std::vector<std::pair<std::string, std::string>>& Summaries() {
  static const auto* list = new std::vector<std::pair<std::string, std::string>>{
      {"models", "list the models Loom can build"},
      {"ops", "list the op kinds of the IR"},
      {"plan", "split a model's training step into a distributed plan"},
      {"show", "summarise a model's training graph or a graph file"},
      {"graph", "write a model's training graph as text IR or JSON"},
      {"search", "search a pipeline schedule (repetend, warm-up, cool-down) under memory caps"},
      {"simulate", "time and check a schedule; write its Gantt chart and trace"},
      {"verify", "prove a plan equivalent to its model's training step (exit 0, 1 or 2)"},
      {"run", "run a plan's training steps on the CPU (or CUDA) backend; --check compares"},
  };
  return *list;
}

std::string TopHelp() {
  std::string out =
      "usage: loom <command> [flags]\n\n"
      "Loom builds, plans, schedules and verifies distributed training steps.\n\ncommands:\n";
  for (const auto& [name, summary] : Summaries()) {
    absl::StrAppend(&out, absl::StrFormat("  %-10s %s\n", name, summary));
  }
  absl::StrAppend(&out, "\n'loom <command> --help' describes a command's flags.\n");
  return out;
}

}  // namespace

int RunLoom(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << TopHelp();
    return kExitBadInput;
  }
  const std::string& command = args[0];
  if (command == "--help" || command == "-h" || command == "help") {
    out << TopHelp();
    return kExitOk;
  }
  if (command == "--version" || command == "version") {
    out << "loom " << kVersion << "\n";
    return kExitOk;
  }
  static const auto* commands = new std::vector<std::pair<std::string, Command>>{
      {"models", CmdModels}, {"ops", CmdOps}, {"plan", CmdPlan}, {"show", CmdShow}, {"graph", CmdGraph},
      {"search", CmdSearch}, {"simulate", CmdSimulate}, {"verify", CmdVerify}, {"run", CmdRun}};
  std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& [name, fn] : *commands) {
    if (name == command) return fn(rest, out, err);
  }
  err << "loom: error: unknown command '" << command << "' (see 'loom --help')\n";
  return kExitBadInput;
}

}  // namespace loom::tools
