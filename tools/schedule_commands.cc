#include "tools/schedule_commands.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/json_util.h"
#include "ir/plan_json.h"
#include "ir/status_macros.h"
#include "schedule/block_model.h"
#include "schedule/placements.h"
#include "schedule/plan_blocks.h"
#include "schedule/predefined.h"
#include "schedule/render.h"
#include "schedule/schedule.h"
#include "schedule/search.h"
#include "schedule/span_timing.h"
#include "schedule/torch_csv.h"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/spec_flags.h"
#include "tools/terminal_status.h"

namespace loom::tools {
namespace {

std::string Slashed(const std::vector<int64_t>& values) { return absl::StrJoin(values, "/"); }

std::string Percent(double ratio) { return absl::StrFormat("%.2f%%", 100.0 * ratio); }

// "1,2,1" -> {1, 2, 1}: positive or zero integers, `min_count` to `max_count` of them.
absl::StatusOr<std::vector<int64_t>> IntList(absl::string_view flag, absl::string_view text,
                                             size_t min_count, size_t max_count) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag '", flag, "' expects comma-separated non-negative integers, got '", text, "'"));
    }
    out.push_back(v);
  }
  if (out.size() < min_count || out.size() > max_count) {
    return absl::InvalidArgumentError(absl::StrCat("flag '", flag, "' expects ", min_count, " to ",
                                                   max_count, " numbers, got '", text, "'"));
  }
  return out;
}

// Stage model costs from --costs and --activation (`fallback` when --costs is absent).
absl::StatusOr<schedule::StageCosts> StageCostsFromFlags(const FlagSet& flags,
                                                         absl::string_view fallback) {
  LOOM_ASSIGN_OR_RETURN(
      std::vector<int64_t> costs,
      IntList("--costs", flags.GetString("--costs").value_or(std::string(fallback)), 2, 4));
  schedule::StageCosts c;
  c.forward = costs[0];
  c.backward_input = costs[1];
  c.backward_weight = costs.size() > 2 ? costs[2] : 0;
  c.comm = costs.size() > 3 ? costs[3] : 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> memory,
                        IntList("--activation", flags.GetString("--activation").value_or("2,1"), 1, 2));
  c.activation = memory[0];
  c.weight_memory = memory.size() > 1 ? memory[1] : 0;
  if (c.backward_weight == 0) c.weight_memory = 0;
  return c;
}

void AddStageFlags(FlagSet& flags) {
  flags.AddString("--costs", "F,B[,W[,C]]",
                  "stage spans: forward, backward (input gradient when W > 0), weight "
                  "gradient, transfer lag between devices (default 1,1,1,0)");
  flags.AddString("--activation", "A[,W]",
                  "stage memory: a forward keeps A, the weight backward frees W of it "
                  "(default 2,1; A alone when the backward is not split)");
}

void AddOutputFlags(FlagSet& flags) {
  flags.AddString("--output", "FILE", "write the schedule as JSON");
  flags.AddAlias("-o", "--output");
  flags.AddString("--csv", "FILE",
                  "write the schedule as torch.distributed.pipelining CSV (each rank's actions "
                  "in order, no idle steps)");
  flags.AddString("--gantt", "FILE", "write an SVG Gantt chart (one row per device)");
  flags.AddString("--trace", "FILE", "write a Chrome trace (opens in Perfetto)");
}

// Writes the files the output flags ask for and says so on `out` (unless quiet).
absl::Status WriteOutputs(const FlagSet& flags, const schedule::BlockModel& model,
                          const schedule::Schedule& schedule, const schedule::SimResult& sim,
                          bool quiet, std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> files;
  if (auto path = flags.GetString("--output")) {
    files.push_back({*path, schedule::ScheduleToJson(model, schedule, &sim)});
  }
  if (auto path = flags.GetString("--csv")) {
    // Each rank's actions in order, no idle steps: torch runs a rank's list in
    // order and its transfers block, so the time grid adds only empty fields (and,
    // with plan-sized spans, a file of millions of them).
    LOOM_ASSIGN_OR_RETURN(std::string csv, schedule::ScheduleToTorchCsv(model, schedule));
    files.push_back({*path, std::move(csv)});
  }
  const bool timed = !sim.start.empty();
  if (flags.Has("--gantt") || flags.Has("--trace")) {
    if (!timed) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot draw the schedule: ", sim.violation));
    }
  }
  if (auto path = flags.GetString("--gantt")) {
    files.push_back({*path, schedule::ScheduleToSvg(model, schedule, sim)});
  }
  if (auto path = flags.GetString("--trace")) {
    files.push_back({*path, schedule::ScheduleToChromeTrace(model, schedule, sim)});
  }
  for (const auto& [path, text] : files) {
    LOOM_RETURN_IF_ERROR(ir::WriteFileAtomically(path, text));
    if (!quiet) out << "wrote " << path << "\n";
  }
  return absl::OkStatus();
}

void AddModelSourceFlags(FlagSet& flags) {
  flags.AddString("--placement", "NAME",
                  absl::StrCat("a preset placement: ",
                               absl::StrJoin(schedule::PlacementNames(), ", ")));
  flags.AddString("--devices", "D", "devices of the placement or stage model");
  flags.AddBool("--infer", "the inference form of the placement (forward blocks, no memory)");
  flags.AddString("--blocks", "FILE", "a block model in JSON (docs/formats.md)");
  flags.AddString("--stages", "S", "a pipeline stage model with S stages on --devices devices");
  flags.AddString("--layout", "L", "stage placement: loop (default; stage s on device s % D) or v");
  AddStageFlags(flags);
  flags.AddString("--memory", "M", "memory cap of every device (replaces the model's caps): "
                                   "the model's units, or bytes with a unit with --plan (80GiB)");
  flags.AddString("--plan", "FILE",
                  "blocks from a distributed plan (one per pipeline stage and phase); -o then "
                  "writes the plan with every device's order");
  AddSpecFlags(flags, "with --plan: ");
}

// The block model the flags name: a placement, a stage model or a JSON file.
absl::StatusOr<schedule::BlockModel> ModelFromFlags(const FlagSet& flags) {
  const int sources = flags.Has("--placement") + flags.Has("--blocks") + flags.Has("--stages") +
                      flags.Has("--plan");
  if (sources != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --placement, --stages, --blocks or --plan");
  }
  schedule::BlockModel model;
  if (auto file = flags.GetString("--blocks")) {
    LOOM_ASSIGN_OR_RETURN(model, schedule::LoadBlockModelFile(*file));
  } else {
    LOOM_ASSIGN_OR_RETURN(int64_t devices, flags.GetInt("--devices", -1, 1, 4096));
    if (devices < 0) return absl::InvalidArgumentError("missing --devices D");
    if (auto placement = flags.GetString("--placement")) {
      LOOM_ASSIGN_OR_RETURN(model, schedule::MakePlacement(*placement, static_cast<int>(devices),
                                                           flags.GetBool("--infer")));
    } else {
      LOOM_ASSIGN_OR_RETURN(int64_t stages, flags.GetInt("--stages", 0, 1, 65536));
      LOOM_ASSIGN_OR_RETURN(schedule::StageCosts c, StageCostsFromFlags(flags, "1,1,1,0"));
      LOOM_ASSIGN_OR_RETURN(model, schedule::MakeStageModel(
                                       static_cast<int>(devices), static_cast<int>(stages),
                                       flags.GetString("--layout").value_or("loop"), c));
    }
  }
  if (flags.Has("--memory")) {
    LOOM_ASSIGN_OR_RETURN(int64_t cap, flags.GetInt("--memory", 0, 0, int64_t{1} << 50));
    model.SetUniformCap(cap);
  }
  LOOM_RETURN_IF_ERROR(schedule::ValidateBlockModel(model));
  return model;
}

// The name printed after a plan's block memory figures: " MiB" for its unit of
// 2^20 bytes (the cost model's), else the unit's size.
std::string MemoryUnitName(int64_t bytes_per_unit) {
  switch (bytes_per_unit) {
    case int64_t{1} << 10: return " KiB";
    case int64_t{1} << 20: return " MiB";
    case int64_t{1} << 30: return " GiB";
    default: return absl::StrCat(" x ", bytes_per_unit, " bytes");
  }
}

// Memory figures of a block model in its unit: " MiB" for a plan's blocks, none
// for an abstract model's own units.
std::string CapText(const schedule::BlockModel& model, absl::string_view unit = "") {
  if (!model.has_cap()) return "unlimited";
  const auto [lo, hi] = std::minmax_element(model.memory_cap.begin(), model.memory_cap.end());
  return absl::StrCat(*lo == *hi ? absl::StrCat(*lo) : Slashed(model.memory_cap), unit);
}

// --memory for a plan's blocks: bytes with a unit (80GiB), as 'loom verify
// --memory' takes them, in the blocks' memory unit (rounded down).
absl::StatusOr<int64_t> PlanMemoryCap(const FlagSet& flags, int64_t unit_bytes) {
  const std::string text = flags.GetString("--memory").value_or("");
  if (!text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag '--memory' of a plan's devices takes bytes with a unit (80GiB, as 'loom verify "
        "--memory' does), got '", text, "'"));
  }
  LOOM_ASSIGN_OR_RETURN(int64_t bytes, flags.GetBytes("--memory", 0, int64_t{1} << 60));
  return bytes / unit_bytes;
}

// The schedules compared on the model, the returned one marked.
void PrintCandidates(const schedule::SearchResult& r, absl::string_view unit, std::ostream& out) {
  const bool span = r.objective == schedule::Objective::kSpan;
  out << "schedules:    compared on this model within its caps ("
      << (span ? "span, makespan" : "makespan") << ", peak memory)\n";
  std::vector<std::string> undefined;
  for (const schedule::ScheduleCandidate& c : r.candidates) {
    if (!c.defined) {
      undefined.push_back(c.name);
      continue;
    }
    out << absl::StrFormat("  %-25s ", c.name);
    if (c.fits) {
      if (span) out << absl::StrFormat("%-12d ", c.span);
      out << absl::StrFormat("%-12d %s%s", c.makespan, Slashed(c.peak_memory), unit);
      if (c.name == r.schedule.name) out << "  <- returned";
    } else {
      out << "-            " << c.why_not;
    }
    out << "\n";
  }
  if (!undefined.empty()) {
    out << "  not defined on this model: " << absl::StrJoin(undefined, ", ") << "\n";
  }
}

void PrintSearch(const schedule::BlockModel& model, const schedule::SearchResult& r,
                 int microbatches, absl::string_view unit, std::ostream& out) {
  out << "model:        " << model.name << ", " << model.num_blocks() << " blocks on "
      << model.num_devices << " devices, " << microbatches << " micro-batches, memory cap "
      << CapText(model, unit) << "\n";
  const bool searched = !r.candidates.empty() && r.candidates.front().fits;
  std::string what = "the searched repetend";
  if (r.schedule.name != "search") {
    what = absl::StrCat(absl::StartsWith(r.schedule.name, "list/") ? "a list schedule"
                        : r.schedule.name == "inflight"
                            ? "the in-flight search: micro-batches in flight per device"
                        : r.schedule.name == "serial" ? "micro-batches one after another"
                        : r.schedule.name == "exact"  ? "a branch and bound over every schedule"
                        : r.schedule.name == "local"  ? "a local search over device orders"
                                                      : "predefined",
                        searched ? ", better than the searched repetend"
                                 : "; the search found no repetend");
  }
  out << "schedule:     " << r.schedule.name << " (" << what << ")\n";
  if (r.objective == schedule::Objective::kSpan) {
    out << "objective:    span (iterations back to back: the longest device span, each "
           "schedule timed for its least)\n";
  }
  if (r.period > 0) {
    out << "period:       " << r.period
        << (!r.period_optimal ? ""
            : r.period == r.period_lower_bound
                ? " (proved optimal for a repetend: equals the lower bound)"
                : " (proved optimal for a repetend: no shorter period has one)")
        << "\n";
  }
  out << "lower bound:  " << r.period_lower_bound << " (most work of one micro-batch on a device)\n";
  if (!r.gap_reason.empty()) out << "gap:          " << r.gap_reason << "\n";
  out << "makespan:     " << r.sim.makespan << " (lower bound " << r.makespan_lower_bound
      << (r.makespan_optimal ? ": proved optimal, " + r.makespan_proof : "; not proved optimal")
      << ")\n";
  out << "span:         " << r.sim.span << " (longest device, first start to last end; lower bound "
      << r.span_lower_bound << (r.span_optimal ? ": proved least" : "") << ")\n";
  out << "bubble:       " << Percent(r.sim.bubble_ratio) << " of the makespan, "
      << Percent(r.sim.span_bubble_ratio) << " of the span\n";
  out << "peak memory:  " << Slashed(r.sim.peak_memory) << unit << "\n";
  if (r.period > 0) {
    out << "repetend:     " << r.in_flight << " micro-batches in flight, latency " << r.latency
        << "\n";
  }
  PrintCandidates(r, unit, out);
  out << absl::StrFormat("search time:  %.2f ms (%d nodes)\n", r.seconds * 1e3, r.nodes);
  out << "valid:        " << (r.sim.valid ? "yes" : "no: " + r.sim.violation) << "\n";
}

std::string SearchJson(const schedule::BlockModel& model, const schedule::SearchResult& r) {
  ir::OrderedJson j;
  j["model"] = model.name;
  j["devices"] = model.num_devices;
  j["microbatches"] = r.schedule.microbatches;
  j["schedule"] = r.schedule.name;
  j["period"] = r.period;
  j["lower_bound"] = r.period_lower_bound;
  j["period_optimal"] = r.period_optimal;
  if (!r.gap_reason.empty()) j["gap_reason"] = r.gap_reason;
  j["makespan"] = r.sim.makespan;
  j["makespan_lower_bound"] = r.makespan_lower_bound;
  j["makespan_optimal"] = r.makespan_optimal;
  if (!r.makespan_proof.empty()) j["makespan_proof"] = r.makespan_proof;
  j["objective"] = schedule::ObjectiveName(r.objective);
  j["span"] = r.sim.span;
  j["span_lower_bound"] = r.span_lower_bound;
  j["span_optimal"] = r.span_optimal;
  j["bubble_ratio"] = r.sim.bubble_ratio;
  j["span_bubble_ratio"] = r.sim.span_bubble_ratio;
  j["peak_memory"] = r.sim.peak_memory;
  j["in_flight"] = r.in_flight;
  ir::OrderedJson candidates = ir::OrderedJson::array();
  for (const schedule::ScheduleCandidate& c : r.candidates) {
    ir::OrderedJson e;
    e["name"] = c.name;
    e["defined"] = c.defined;
    e["fits"] = c.fits;
    if (c.fits) {
      e["makespan"] = c.makespan;
      e["span"] = c.span;
      e["peak_memory"] = c.peak_memory;
    } else {
      e["why_not"] = c.why_not;
    }
    candidates.push_back(std::move(e));
  }
  j["candidates"] = std::move(candidates);
  j["search_seconds"] = r.seconds;
  j["search_nodes"] = r.nodes;
  j["valid"] = r.sim.valid;
  return ir::DumpJson(j) + "\n";
}

}  // namespace

int CmdSearch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("search",
                "Searches the order of every device's blocks across micro-batches: a repetend\n"
                "(steady state) at the least period the memory cap allows, with warm-up and\n"
                "cool-down re-timed with it. Prints the period, its lower bound, the makespan,\n"
                "bubble, peak memory and search time.");
  AddModelSourceFlags(flags);
  flags.AddString("--microbatches", "N", "micro-batches to schedule (default 1)");
  flags.AddString("--time-limit", "S", "stop searching after S seconds (default: no limit)");
  flags.AddString("--node-limit", "N", "search nodes allowed (default 2000000; deterministic)");
  flags.AddString("--objective", "O",
                  "makespan (default: one iteration, first start to last end) or span "
                  "(iterations back to back without a barrier: the longest device's first "
                  "start to last end)");
  flags.AddBool("--json", "print the figures as JSON");
  AddOutputFlags(flags);
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  TerminalStatus status("search", err);
  auto fail = [&](const absl::Status& s) {
    status.Done();
    return Fail(err, "search", s);
  };
  // With --plan, the blocks come from the plan and the order goes back into it.
  std::optional<ir::Plan> plan;
  std::optional<ir::Graph> spec;
  std::optional<schedule::PlanBlocks> plan_blocks;
  absl::StatusOr<schedule::BlockModel> model = absl::UnknownError("no model");
  if (auto path = flags.GetString("--plan")) {
    if (flags.Has("--placement") || flags.Has("--blocks") || flags.Has("--stages")) {
      return fail(absl::InvalidArgumentError(
          "give exactly one of --placement, --stages, --blocks or --plan"));
    }
    auto loaded = LoadPlanShowingProgress(*path, "search");
    if (!loaded.ok()) return fail(loaded.status());
    plan = *std::move(loaded);
    status.Step("building the training step the plan records");
    auto built = SpecForPlan(flags, *plan);
    if (!built.ok()) return fail(built.status());
    spec = *std::move(built);
    status.Step("timing the blocks of the plan's devices");
    auto blocks = schedule::BlocksFromPlan(*spec, *plan);
    if (!blocks.ok()) return fail(blocks.status());
    plan_blocks = *std::move(blocks);
    schedule::BlockModel m = plan_blocks->model;
    if (flags.Has("--memory")) {
      auto cap = PlanMemoryCap(flags, plan_blocks->bytes_per_memory_unit);
      if (!cap.ok()) return fail(cap.status());
      m.SetUniformCap(*cap);
    }
    model = std::move(m);
  } else {
    model = ModelFromFlags(flags);
  }
  if (!model.ok()) return fail(model.status());
  schedule::SearchOptions options;
  auto microbatches = flags.GetInt("--microbatches", plan_blocks.has_value() ? plan_blocks->microbatches : 1, 1, 1 << 20);
  if (!microbatches.ok()) return fail(microbatches.status());
  options.microbatches = static_cast<int>(*microbatches);
  auto seconds = flags.GetDouble("--time-limit", 0, 0, 1e6);
  if (!seconds.ok()) return fail(seconds.status());
  options.time_limit_seconds = *seconds;
  auto nodes = flags.GetInt("--node-limit", options.node_limit, 1, int64_t{1} << 40);
  if (!nodes.ok()) return fail(nodes.status());
  options.node_limit = *nodes;
  auto objective = schedule::ParseObjective(flags.GetString("--objective").value_or("makespan"));
  if (!objective.ok()) return fail(objective.status());
  options.objective = *objective;
  status.Step("searching");
  auto result = schedule::SearchSchedule(*model, options);
  status.Done();
  if (!result.ok()) {
    // No schedule within the limits is a finding about the input, not a crash.
    if (result.status().code() == absl::StatusCode::kResourceExhausted) {
      err << "loom search: error: " << result.status().message() << "\n";
      return kExitBadInput;
    }
    return fail(result.status());
  }
  const bool json = flags.GetBool("--json");
  if (json) {
    out << SearchJson(*model, *result);
  } else {
    PrintSearch(*model, *result, options.microbatches, plan_blocks.has_value() ? MemoryUnitName(plan_blocks->bytes_per_memory_unit) : "", out);
  }
  if (plan.has_value()) {
    if (options.microbatches != plan_blocks->microbatches) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--microbatches ", options.microbatches, " differs from the plan's ",
          plan_blocks->microbatches)));
    }
    if (auto path = flags.GetString("--output")) {
      status.Step(absl::StrCat("writing ", *path));
      auto ordered = schedule::ApplySchedule(*plan, *plan_blocks, result->schedule);
      if (!ordered.ok()) return fail(ordered.status());
      absl::Status saved = ir::SavePlanFile(*ordered, *path);
      if (!saved.ok()) return fail(saved);
      status.Done();
      if (!json) {
        out << "wrote " << *path
            << (ordered->is_factored()
                    ? " (the factored plan with the order of each scale-unit device, which every "
                      "data-parallel replica runs)\n"
                    : " (the plan with every device's order)\n");
      }
    }
  }
  FlagSet outputs = flags;
  if (plan.has_value()) outputs.Erase("--output");  // the plan, written above
  absl::Status written = WriteOutputs(outputs, *model, result->schedule, result->sim, json, out);
  if (!written.ok()) return fail(written);
  return kExitOk;
}

namespace {

// The stage model a predefined schedule is defined on (see predefined.h).
absl::StatusOr<schedule::LoadedSchedule> PredefinedFromFlags(const FlagSet& flags,
                                                             const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(int64_t devices, flags.GetInt("--devices", -1, 1, 4096));
  if (devices < 0) return absl::InvalidArgumentError("missing --devices D");
  LOOM_ASSIGN_OR_RETURN(int64_t microbatches, flags.GetInt("--microbatches", -1, 1, 1 << 20));
  if (microbatches < 0) return absl::InvalidArgumentError("missing --microbatches N");
  LOOM_ASSIGN_OR_RETURN(int64_t chunks, flags.GetInt("--chunks", 2, 1, 64));
  const bool split = name == "zb_h1" || name == "zb_h2" || name == "zb_v" || name == "dualpipe";
  LOOM_ASSIGN_OR_RETURN(schedule::StageCosts costs,
                        StageCostsFromFlags(flags, split ? "1,1,1,0" : "1,1"));
  const int p = static_cast<int>(devices);
  schedule::LoadedSchedule loaded;
  if (name == "chimera" || name == "dualpipe") {
    LOOM_ASSIGN_OR_RETURN(loaded.model, schedule::MakeBidirectionalStageModel(p, costs));
  } else if (name == "zb_v") {
    LOOM_ASSIGN_OR_RETURN(loaded.model, schedule::MakeStageModel(p, 2 * p, "v", costs));
  } else if (name == "interleaved_1f1b") {
    LOOM_ASSIGN_OR_RETURN(loaded.model,
                          schedule::MakeStageModel(p, p * static_cast<int>(chunks), "loop", costs));
  } else {
    LOOM_ASSIGN_OR_RETURN(loaded.model, schedule::MakeStageModel(p, p, "loop", costs));
  }
  LOOM_ASSIGN_OR_RETURN(loaded.schedule, schedule::MakePredefinedSchedule(
                                             name, loaded.model, static_cast<int>(microbatches)));
  return loaded;
}

// A schedule to simulate, and for a plan's blocks the bytes of their memory unit
// (0 for a model in abstract units).
struct ScheduleToSimulate : schedule::LoadedSchedule {
  int64_t bytes_per_memory_unit = 0;
};

// The block model of an ordered plan and the schedule its order runs. The plan
// is checked against its step once, by BlocksFromPlan.
absl::StatusOr<ScheduleToSimulate> ScheduleFromPlan(const FlagSet& flags,
                                                    const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(ir::Plan plan, LoadPlanShowingProgress(path, "simulate"));
  LOOM_ASSIGN_OR_RETURN(ir::Graph spec, SpecForPlan(flags, plan));
  LOOM_ASSIGN_OR_RETURN(schedule::PlanBlocks blocks, schedule::BlocksFromPlan(spec, plan));
  ScheduleToSimulate loaded;
  LOOM_ASSIGN_OR_RETURN(loaded.schedule, schedule::ScheduleFromPlanOrder(plan, blocks));
  loaded.model = std::move(blocks.model);
  loaded.bytes_per_memory_unit = blocks.bytes_per_memory_unit;
  return loaded;
}

// The schedule the flags name: a schedule file (JSON, or a torch CSV by its
// extension), a predefined schedule or an ordered plan.
absl::StatusOr<ScheduleToSimulate> ScheduleFromFlags(const FlagSet& flags) {
  auto file = flags.Positional();
  auto name = flags.GetString("--schedule");
  auto plan = flags.GetString("--plan");
  if (file.has_value() + name.has_value() + plan.has_value() != 1) {
    return absl::InvalidArgumentError(
        "give a schedule file, --schedule NAME or --plan FILE (one of them)");
  }
  if (plan.has_value()) return ScheduleFromPlan(flags, *plan);
  ScheduleToSimulate loaded;
  if (name.has_value()) {
    LOOM_ASSIGN_OR_RETURN(static_cast<schedule::LoadedSchedule&>(loaded),
                          PredefinedFromFlags(flags, *name));
    return loaded;
  }
  const bool csv = file->size() >= 4 && file->substr(file->size() - 4) == ".csv";
  if (!csv) {
    LOOM_ASSIGN_OR_RETURN(static_cast<schedule::LoadedSchedule&>(loaded),
                          schedule::LoadScheduleFile(*file));
    return loaded;
  }
  LOOM_ASSIGN_OR_RETURN(std::string text, ir::ReadTextFile(*file));
  schedule::TorchImportOptions options;
  LOOM_ASSIGN_OR_RETURN(options.costs, StageCostsFromFlags(flags, "1,1,1,0"));
  options.comm_steps = flags.GetBool("--comm-steps");
  LOOM_ASSIGN_OR_RETURN(static_cast<schedule::LoadedSchedule&>(loaded),
                        schedule::ScheduleFromTorchCsv(text, *file, options));
  return loaded;
}

void PrintSimulation(const std::string& what, const schedule::BlockModel& m,
                     const schedule::Schedule& schedule, const schedule::SimResult& sim,
                     absl::string_view unit, std::ostream& out) {
  out << "schedule:     " << what << ", " << m.name << " on " << m.num_devices << " devices, "
      << schedule.microbatches << " micro-batches\n";
  out << "valid:        " << (sim.valid ? "yes" : "no: " + sim.violation) << "\n";
  if (sim.start.empty()) return;
  std::vector<std::string> per_device;
  for (double b : sim.bubble) per_device.push_back(Percent(b));
  out << "makespan:     " << sim.makespan << "\n";
  out << "span:         " << sim.span << " (longest device, first start to last end)\n";
  out << "bubble:       " << Percent(sim.bubble_ratio) << " of the makespan (per device "
      << absl::StrJoin(per_device, " ") << "), " << Percent(sim.span_bubble_ratio)
      << " of the span\n";
  out << "peak memory:  " << Slashed(sim.peak_memory) << unit << " (cap " << CapText(m, unit)
      << ")\n";
}

}  // namespace

int CmdSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FlagSet flags("simulate",
                "Times a schedule as soon as possible with its device orders (or at its own\n"
                "times), checks every rule (completeness, deadlock, overlap, dependencies,\n"
                "memory) and prints its makespan, bubble and peak memory; writes its Gantt\n"
                "chart and trace. Exit 0 when valid, 1 when a rule is broken (the first one\n"
                "is named), 2 on bad input.");
  flags.AddPositional("SCHEDULE",
                      "a schedule file: JSON as 'loom search -o' writes, or a\n"
                      "                               torch.distributed.pipelining CSV (*.csv)");
  flags.AddString("--schedule", "NAME",
                  absl::StrCat("a predefined schedule instead: ",
                               absl::StrJoin(schedule::PredefinedScheduleNames(), ", ")));
  flags.AddString("--devices", "P", "pipeline devices of the predefined schedule");
  flags.AddString("--microbatches", "N",
                  "micro-batches of the predefined schedule (pairs for chimera, dualpipe)");
  flags.AddString("--plan", "FILE",
                  "a plan with its order ('loom search --plan -o'): its blocks, timed in the "
                  "order the plan runs them (the block order only: 'loom verify' checks the "
                  "plan's programs)");
  AddSpecFlags(flags, "with --plan: ");
  flags.AddString("--chunks", "V", "model chunks per device for interleaved_1f1b (default 2)");
  AddStageFlags(flags);
  flags.AddBool("--comm-steps", "CSV input: count sends and receives as steps, as torch's "
                                "simulator does");
  flags.AddString("--memory", "M",
                  "memory cap of every device (replaces the schedule's caps): in the model's "
                  "units, or with --plan bytes with a unit (80GiB)");
  flags.AddBool("--least-span", "time the orders for the least longest device span "
                                "(iterations back to back) instead of as soon as possible");
  flags.AddBool("--json", "print the figures as JSON");
  AddOutputFlags(flags);
  if (int rc = ParseOrExit(flags, args, out, err); rc >= 0) return rc;
  auto fail = [&](const absl::Status& s) { return Fail(err, "simulate", s); };
  auto loaded = ScheduleFromFlags(flags);
  if (!loaded.ok()) return fail(loaded.status());
  if (flags.Has("--memory")) {
    auto cap = loaded->bytes_per_memory_unit > 0
                   ? PlanMemoryCap(flags, loaded->bytes_per_memory_unit)
                   : flags.GetInt("--memory", 0, 0, int64_t{1} << 50);
    if (!cap.ok()) return fail(cap.status());
    loaded->model.SetUniformCap(*cap);
  }
  const std::string unit = loaded->bytes_per_memory_unit > 0
                               ? MemoryUnitName(loaded->bytes_per_memory_unit)
                               : std::string();
  if (flags.GetBool("--least-span")) {
    // Orders that cannot be timed (a deadlock) are the simulator's to report, as a
    // broken rule.
    auto timed = schedule::TimeForLeastSpan(loaded->model, loaded->schedule);
    if (timed.ok()) {
      loaded->schedule = *std::move(timed);
    } else if (!absl::IsFailedPrecondition(timed.status())) {
      return fail(timed.status());
    }
  }
  auto sim = schedule::Simulate(loaded->model, loaded->schedule);
  if (!sim.ok()) return fail(sim.status());
  const bool json = flags.GetBool("--json");
  if (json) {
    ir::OrderedJson j;
    j["valid"] = sim->valid;
    if (!sim->valid) j["violation"] = sim->violation;
    j["makespan"] = sim->makespan;
    j["span"] = sim->span;
    j["bubble_ratio"] = sim->bubble_ratio;
    j["span_bubble_ratio"] = sim->span_bubble_ratio;
    j["bubble"] = sim->bubble;
    j["peak_memory"] = sim->peak_memory;
    out << ir::DumpJson(j) << "\n";
  } else {
    std::string what = loaded->schedule.name;
    if (what.empty()) what = flags.Positional().value_or("schedule");
    PrintSimulation(what, loaded->model, loaded->schedule, *sim, unit, out);
  }
  absl::Status written = WriteOutputs(flags, loaded->model, loaded->schedule, *sim, json, out);
  if (!written.ok()) return fail(written);
  return sim->valid ? kExitOk : kExitFailure;
}

}  // namespace loom::tools
