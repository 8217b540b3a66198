#include "api/loom.h"

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

absl::StatusOr<ir::Graph> BuildStep(const ModelConfig& model, const ParallelConfig& parallel) {
  if (model.name.empty()) return absl::InvalidArgumentError("missing the model name");
  if (parallel.microbatches < 1) {
    return absl::InvalidArgumentError("microbatches must be at least 1");
  }
  models::ModelOptions options;
  options.tiny = model.tiny;
  options.layers = model.layers;
  options.batch = model.batch > 0 ? model.batch : parallel.dp;
  options.seq = model.seq;
  options.dtype = ir::ModelDType(model.precision);
  LOOM_ASSIGN_OR_RETURN(ir::Graph forward, models::BuildForward(model.name, options));
  ir::TrainingOptions training;
  training.microbatches = parallel.microbatches;
  training.precision = model.precision;
  return ir::BuildTrainingStep(forward, training);
}

transform::Strategy StrategyOf(const ParallelConfig& parallel) {
  transform::Strategy s;
  s.dp = parallel.dp;
  s.tp = parallel.tp;
  s.pp = parallel.pp;
  s.vpp = parallel.vpp;
  s.ep = parallel.ep;
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
  LOOM_ASSIGN_OR_RETURN(schedule::SearchResult found, schedule::SearchSchedule(model, options));
  LOOM_ASSIGN_OR_RETURN(ir::Plan ordered,
                        schedule::ApplySchedule(step, plan, blocks, found.schedule));
  plan = std::move(ordered);
  SearchSummary summary;
  summary.schedule = found.schedule.name;
  summary.period = found.period;
  summary.period_lower_bound = found.period_lower_bound;
  summary.makespan = found.sim.makespan;
  summary.makespan_lower_bound = found.makespan_lower_bound;
  summary.makespan_optimal = found.makespan_optimal;
  summary.makespan_proof = found.makespan_proof;
  summary.bubble = found.sim.bubble_ratio;
  summary.peak_memory = found.sim.peak_memory;
  summary.seconds = found.seconds;
  summary.svg = schedule::ScheduleToSvg(model, found.schedule, found.sim);
  return summary;
}

absl::StatusOr<verify::VerifyReport> VerifyPlan(const ir::Graph& step, const ir::Plan& plan,
                                                const VerifyConfig& config) {
  LOOM_RETURN_IF_ERROR(ir::ValidatePlan(step, plan));
  verify::VerifyOptions options;
  options.cache_dir = config.cache_dir;
  options.solver_timeout_ms = config.solver_timeout_ms;
  options.memory_capacity_bytes = config.memory_capacity_bytes;
  options.threads = config.threads;
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
