#include "api/loom.h"

#include <algorithm>
#include <utility>

#include "exec/backend.h"
#include "ir/autodiff.h"
#include "ir/plan_json.h"
#include "ir/status_macros.h"
#include "models/models.h"
#include "schedule/plan_blocks.h"
#include "schedule/render.h"
#include "schedule/search.h"
#include "transform/parallelize.h"
#include "verify/report.h"

namespace loom {

std::vector<std::string> ListModels() {
  std::vector<std::string> names;
  for (const models::ModelInfo& m : models::ListModels()) names.push_back(m.name);
  return names;
}

namespace {

models::ModelOptions ModelOptionsOf(const ir::PlanStepSource& source,
                                    std::optional<ir::DType> dtype = std::nullopt) {
  models::ModelOptions options;
  options.tiny = source.tiny;
  options.layers = source.layers;
  options.batch = source.batch;
  options.seq = source.seq;
  options.dtype = dtype.value_or(ir::ModelDType(source.training.precision));
  return options;
}

// The step of `source` from its forward graph (built from the same source): every
// training step the BuildStep functions and MakePlan return is built here.
absl::StatusOr<ir::Graph> StepOf(const ir::Graph& forward, const ir::PlanStepSource& source) {
  return ir::BuildTrainingStep(forward, source.training);
}

// The source as given (sizes possibly 0: the configuration's), then as built: the
// layers are the forward's layer tags, batch and sequence the token input's shape.
struct Resolved {
  ir::PlanStepSource source;
  ir::Graph forward;
};

absl::StatusOr<Resolved> Resolve(const ModelConfig& model, const ParallelConfig& parallel) {
  if (model.name.empty()) return absl::InvalidArgumentError("missing the model name");
  if (parallel.microbatches < 1) {
    return absl::InvalidArgumentError("microbatches must be at least 1");
  }
  if (!(model.max_grad_norm >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_grad_norm must be at least 0, got ", model.max_grad_norm));
  }
  Resolved r;
  ir::PlanStepSource& s = r.source;
  s.model = model.name;
  s.tiny = model.tiny;
  s.layers = model.layers;
  s.batch = model.batch > 0 ? model.batch : parallel.dp;
  s.seq = model.seq;
  s.training.microbatches = parallel.microbatches;
  s.training.precision = model.precision;
  s.training.max_grad_norm = model.max_grad_norm;
  LOOM_ASSIGN_OR_RETURN(r.forward, BuildForward(s));
  int max_layer = -1;
  for (const ir::Op& op : r.forward.ops()) max_layer = std::max(max_layer, op.info.layer);
  if (s.layers == 0) s.layers = max_layer + 1;
  for (const ir::Tensor& t : r.forward.tensors()) {
    if (t.role != ir::TensorRole::kInput || t.shape.rank() != 2) continue;
    s.batch = t.shape.dim(0);
    s.seq = t.shape.dim(1);
    break;
  }
  return r;
}

}  // namespace

absl::StatusOr<ir::Graph> BuildStep(const ModelConfig& model, const ParallelConfig& parallel) {
  LOOM_ASSIGN_OR_RETURN(Resolved r, Resolve(model, parallel));
  return StepOf(r.forward, r.source);
}

absl::StatusOr<ir::PlanStepSource> StepSourceOf(const ModelConfig& model,
                                                const ParallelConfig& parallel) {
  LOOM_ASSIGN_OR_RETURN(Resolved r, Resolve(model, parallel));
  return r.source;
}

absl::StatusOr<ir::Graph> BuildForward(const ir::PlanStepSource& source,
                                       std::optional<ir::DType> dtype) {
  return models::BuildForward(source.model, ModelOptionsOf(source, dtype));
}

absl::StatusOr<ir::Graph> BuildStep(const ir::PlanStepSource& source,
                                    std::optional<ir::DType> dtype) {
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, BuildForward(source, dtype));
  return StepOf(forward, source);
}

absl::StatusOr<ir::Plan> MakePlan(const ModelConfig& model, const ParallelConfig& parallel) {
  LOOM_ASSIGN_OR_RETURN(Resolved r, Resolve(model, parallel));
  LOOM_ASSIGN_OR_RETURN(ir::Graph step, StepOf(r.forward, r.source));
  LOOM_ASSIGN_OR_RETURN(ir::Plan plan, MakePlan(step, parallel));
  plan.step = std::move(r.source);
  return plan;
}

absl::StatusOr<ir::Graph> StepOfPlan(const ir::Plan& plan) {
  if (!plan.step.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan of '", plan.model, "' does not record the step it was made from (made before "
        "plans carried it); give the model and its sizes"));
  }
  return BuildStep(*plan.step);
}

transform::Strategy StrategyOf(const ParallelConfig& parallel) {
  transform::Strategy s;
  s.dp = parallel.dp;
  s.tp = parallel.tp;
  s.pp = parallel.pp;
  s.vpp = parallel.vpp;
  s.ep = parallel.ep;
  s.cp = parallel.cp;
  s.cp_balanced = parallel.cp_balanced;
  s.sp = parallel.sp;
  s.zero = parallel.zero;
  s.microbatches = parallel.microbatches;
  s.recompute = parallel.recompute;
  s.factored = parallel.factored;
  return s;
}

absl::StatusOr<ir::Plan> MakePlan(const ir::Graph& step, const ParallelConfig& parallel) {
  return transform::Parallelize(step, StrategyOf(parallel));
}

absl::StatusOr<ir::Plan> LoadPlan(const std::string& path) { return ir::LoadPlanFile(path); }

absl::Status SavePlan(const ir::Plan& plan, const std::string& path) {
  return ir::SavePlanFile(plan, path);
}

absl::StatusOr<SearchSummary> SearchSchedule(const ir::Graph& step, ir::Plan& plan,
                                             const SearchConfig& config) {
  LOOM_ASSIGN_OR_RETURN(schedule::PlanBlocks blocks, schedule::BlocksFromPlan(step, plan));
  schedule::BlockModel model = blocks.model;
  if (config.memory_cap.has_value()) model.SetUniformCap(*config.memory_cap);
  schedule::SearchOptions options;
  options.microbatches = blocks.microbatches;
  options.node_limit = config.node_limit;
  options.time_limit_seconds = config.time_limit_seconds;
  LOOM_ASSIGN_OR_RETURN(options.objective, schedule::ParseObjective(config.objective));
  LOOM_ASSIGN_OR_RETURN(schedule::SearchResult found, schedule::SearchSchedule(model, options));
  LOOM_ASSIGN_OR_RETURN(ir::Plan ordered,
                        schedule::ApplySchedule(plan, blocks, found.schedule));
  plan = std::move(ordered);
  SearchSummary summary;
  summary.schedule = found.schedule.name;
  summary.period = found.period;
  summary.period_lower_bound = found.period_lower_bound;
  summary.makespan = found.sim.makespan;
  summary.makespan_lower_bound = found.makespan_lower_bound;
  summary.makespan_optimal = found.makespan_optimal;
  summary.makespan_proof = found.makespan_proof;
  summary.objective = schedule::ObjectiveName(found.objective);
  summary.span = found.sim.span;
  summary.span_lower_bound = found.span_lower_bound;
  summary.span_optimal = found.span_optimal;
  summary.bubble = found.sim.bubble_ratio;
  summary.span_bubble = found.sim.span_bubble_ratio;
  summary.peak_memory = found.sim.peak_memory;
  summary.seconds = found.seconds;
  summary.svg = schedule::ScheduleToSvg(model, found.schedule, found.sim);
  return summary;
}

absl::StatusOr<verify::VerifyReport> VerifyPlan(const ir::Graph& step, const ir::Plan& plan,
                                                const VerifyConfig& config) {
  verify::VerifyOptions options;
  options.cache_dir = config.cache_dir;
  options.solver_timeout_ms = config.solver_timeout_ms;
  options.memory_capacity_bytes = config.memory_capacity_bytes;
  options.threads = config.threads;
  options.progress = config.progress;
  // Verify checks the plan against the step itself before it derives anything.
  return verify::Verify(step, plan, options);
}

std::string VerifyReportJson(const verify::VerifyReport& report, const std::string& model,
                             const std::string& plan_path) {
  verify::ReportContext context;
  context.model = model;
  context.plan = plan_path;
  return verify::ReportJson(report, context);
}

absl::StatusOr<exec::TrainReport> RunPlan(const ir::Graph& step, const ir::Plan& plan,
                                          const RunConfig& config) {
  exec::ExecOptions options;
  options.precision = config.fp64 ? ir::DType::kF64 : ir::DType::kF32;
  options.collective_timeout_s = config.collective_timeout_s;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<exec::Backend> backend,
                        exec::MakeBackend(config.backend, options));
  exec::TrainOptions train;
  train.steps = config.steps;
  train.check = config.check;
  train.seed = config.seed;
  train.data_path = config.data_path;
  train.precision = options.precision;
  return exec::RunTraining(step, plan, *backend, train);
}

}  // namespace loom
