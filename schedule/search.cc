#include "schedule/search.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "schedule/exact_schedule.h"
#include "schedule/inflight_search.h"
#include "schedule/list_schedule.h"
#include "schedule/order_search.h"
#include "schedule/predefined.h"
#include "schedule/repetend_search.h"
#include "schedule/span_timing.h"

namespace loom::schedule {
namespace {

using Clock = std::chrono::steady_clock;

// Problems of up to this many block instances also get a branch and bound over every
// schedule (exact_schedule.h), on a budget of nodes times instances (a node costs
// about a pass over the instances): about half a second.
constexpr int64_t kExactInstances = 256;
constexpr int64_t kExactWork = int64_t{64} << 20;
// The local search before it: moves times instances (a move is one simulation).
constexpr int64_t kLocalWork = int64_t{2} << 20;

ScheduleCandidate Candidate(const std::string& name, const absl::StatusOr<SimResult>& sim) {
  ScheduleCandidate c;
  c.name = name;
  c.defined = sim.ok();
  if (!sim.ok()) {
    c.why_not = std::string(sim.status().message());
  } else if (!sim->valid) {
    c.why_not = sim->violation;
  } else {
    c.fits = true;
    c.makespan = sim->makespan;
    c.span = sim->span;
    c.peak_memory = sim->peak_memory;
  }
  return c;
}

// The micro-batch count and the problem's size are within what the search takes.
absl::Status ValidateSearchSize(const BlockModel& model, const SearchOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateBlockModel(model));
  if (options.microbatches <= 0 || options.microbatches > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch count must be in [1, 1048576], got ", options.microbatches));
  }
  if (int64_t{model.num_blocks()} * options.microbatches > (int64_t{1} << 26)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.num_blocks(), " blocks x ", options.microbatches,
                     " micro-batches is more than this tool schedules"));
  }
  return absl::OkStatus();
}

// Proved impossible: every schedule ends holding what each micro-batch keeps; and
// one micro-batch alone needs its least peak (validation refuses a cap below it
// for any count only where no prefix of a micro-batch goes below zero).
absl::Status CheckCapsAdmitSchedule(const BlockModel& model, const ModelFacts& facts,
                                    int microbatches) {
  for (int d = 0; d < model.num_devices && model.has_cap(); ++d) {
    if (facts.net_memory[d] > 0 && facts.net_memory[d] > model.memory_cap[d] / microbatches) {
      int64_t held = 0;
      const bool overflows = __builtin_mul_overflow(facts.net_memory[d], microbatches, &held);
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': device ", d, " keeps ", facts.net_memory[d],
          " memory per micro-batch, so ", microbatches, " micro-batches end holding ",
          overflows ? std::string("more than 2^63") : absl::StrCat(held), ", above its cap ",
          model.memory_cap[d], " (no schedule can exist)"));
    }
    if (microbatches == 1 && model.memory_cap[d] < facts.single_peak[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "block model '", model.name, "': memory cap ", model.memory_cap[d], " on device ", d,
          " is below what one micro-batch needs (", facts.single_peak[d], ")"));
    }
  }
  return absl::OkStatus();
}

// `schedule` as the objective times it: for kSpan at its least span.
absl::StatusOr<Schedule> TimedFor(Objective objective, const BlockModel& model,
                                  absl::StatusOr<Schedule> schedule) {
  if (objective != Objective::kSpan || !schedule.ok()) return schedule;
  return TimeForLeastSpan(model, *schedule);
}

// The schedules the search competes with: each one simulated within the model's
// caps and listed as a candidate; the best valid one by the objective is kept.
class Alternatives {
 public:
  Alternatives(const BlockModel& model, Objective objective)
      : model_(model), objective_(objective) {}

  // Adds `made` as candidate `name` (`defined`: whether the model admits it).
  void Compare(const std::string& name, absl::StatusOr<Schedule> made, bool defined) {
    made = TimedFor(objective_, model_, std::move(made));
    absl::StatusOr<SimResult> sim =
        made.ok() ? Simulate(model_, *made) : absl::StatusOr<SimResult>(made.status());
    candidates_.push_back(Candidate(name, sim));
    ScheduleCandidate& c = candidates_.back();
    c.defined = defined;
    if (c.fits && (!best_sim_.has_value() ||
                   ObjectiveValue(objective_, *sim) < ObjectiveValue(objective_, *best_sim_))) {
      best_ = *std::move(made);
      best_sim_ = *std::move(sim);
    }
  }

  std::vector<ScheduleCandidate>& candidates() { return candidates_; }
  std::optional<Schedule>& best() { return best_; }
  std::optional<SimResult>& best_sim() { return best_sim_; }

 private:

  const BlockModel& model_;
  const Objective objective_;
  std::vector<ScheduleCandidate> candidates_;
  std::optional<Schedule> best_;
  std::optional<SimResult> best_sim_;
};

// Small problems: randomised list schedules, the best of them (the ramps of a few
// micro-batches are where the repetend is weakest).
absl::StatusOr<Schedule> BestRandomListSchedule(const BlockModel& model, const ModelFacts& facts,
                                                int microbatches) {
  constexpr int kRandomTries = 200;
  std::optional<Schedule> kept;
  int64_t kept_makespan = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < kRandomTries; ++k) {
    std::optional<Schedule> made = RandomListSchedule(model, facts, microbatches,
                                                      /*seed=*/k + 1, /*spread=*/0.5 * (k % 8));
    if (!made.has_value()) continue;
    absl::StatusOr<SimResult> sim = Simulate(model, *made);
    if (sim.ok() && sim->valid && sim->makespan < kept_makespan) {
      kept_makespan = sim->makespan;
      kept = *std::move(made);
    }
  }
  if (!kept.has_value()) {
    return absl::FailedPreconditionError("every randomised list schedule hit a dead end");
  }
  return *std::move(kept);
}

// The in-flight search, compared as "inflight" where the model admits it (every
// block on one device), on a budget of schedules that shrinks as they grow. Its
// schedule, when it found one.
std::optional<Schedule> CompareInFlightSearch(const BlockModel& model, const ModelFacts& facts,
                                              const SearchOptions& options,
                                              Clock::time_point deadline,
                                              Alternatives& alternatives) {
  constexpr int64_t kInFlightWork = int64_t{12} << 20;  // instances built, over all tries
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  const int evaluations =
      static_cast<int>(std::clamp<int64_t>(kInFlightWork / instances, 30, 1000));
  std::optional<InFlightSearchResult> found = SearchInFlightLimits(
      model, facts, options.microbatches, options.objective, evaluations, deadline);
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return std::nullopt;  // not defined: a block spans devices
  }
  if (!found.has_value()) {
    alternatives.Compare("inflight",
                         absl::FailedPreconditionError(
                             "every in-flight limit tried ran into a dead end within the caps"),
                         true);
    return std::nullopt;
  }
  alternatives.Compare("inflight", found->schedule, true);
  return std::move(found->schedule);
}

// Each of `seeds` with its cool-down run by the in-flight rule under every W policy
// (CompleteCooldown): the one best as soon as possible is compared.
void CompareCooldowns(const BlockModel& model, const ModelFacts& facts,
                      const SearchOptions& options, const std::vector<Schedule>& seeds,
                      Alternatives& alternatives) {
  std::optional<Schedule> kept;
  int64_t kept_value = 0;
  for (const Schedule& seed : seeds) {
    for (int policy = 0; policy < kWeightPolicies; ++policy) {
      std::optional<Schedule> completed =
          CompleteCooldown(model, facts, seed, static_cast<WeightPolicy>(policy));
      if (!completed.has_value()) continue;
      absl::StatusOr<SimResult> sim = Simulate(model, *completed);
      if (!sim.ok() || !sim->valid) continue;
      if (!kept.has_value() || ObjectiveValue(options.objective, *sim) < kept_value) {
        kept_value = ObjectiveValue(options.objective, *sim);
        kept = *std::move(completed);
      }
    }
  }
  if (kept.has_value()) {
    const std::string name = kept->name;
    alternatives.Compare(name, *std::move(kept), true);
  }
}

// The published schedules the model admits, the list schedules, the in-flight
// search, cool-downs completed by it, and the serial schedule, timed within the
// same caps.
void CompareAlternatives(const BlockModel& model, const ModelFacts& facts,
                         const SearchOptions& options, Clock::time_point deadline,
                         Alternatives& alternatives) {
  std::vector<Schedule> seeds;  // for the cool-downs
  for (const std::string& name : PredefinedScheduleNames()) {
    absl::StatusOr<Schedule> made = MakePredefinedSchedule(name, model, options.microbatches);
    const bool defined = made.ok();
    if (defined) seeds.push_back(*made);
    alternatives.Compare(name, std::move(made), defined);
  }
  // A list schedule costs instances x ready instances; above this size the
  // repetend is the better use of the time.
  constexpr int64_t kListInstances = int64_t{1} << 16;
  if (int64_t{model.num_blocks()} * options.microbatches <= kListInstances) {
    for (ListPriority rule : ListPriorities()) {
      std::optional<Schedule> made = ListSchedule(model, facts, options.microbatches, rule);
      absl::StatusOr<Schedule> listed =
          made.has_value()
              ? absl::StatusOr<Schedule>(*std::move(made))
              : absl::StatusOr<Schedule>(absl::FailedPreconditionError(
                    "dead end: every block that could start next would exceed a cap"));
      alternatives.Compare(absl::StrCat("list/", ListPriorityName(rule)), std::move(listed), true);
    }
  }
  std::optional<Schedule> in_flight =
      CompareInFlightSearch(model, facts, options, deadline, alternatives);
  if (in_flight.has_value()) seeds.push_back(*std::move(in_flight));
  CompareCooldowns(model, facts, options, seeds, alternatives);
  constexpr int64_t kRandomInstances = 512;
  if (int64_t{model.num_blocks()} * options.microbatches <= kRandomInstances) {
    alternatives.Compare("list/random",
                         BestRandomListSchedule(model, facts, options.microbatches), true);
  }
  // Micro-batches one after another: where memory is too tight for them to
  // overlap, this still gives a valid schedule when one exists in that form.
  std::optional<Schedule> serial = SerialSchedule(model, facts, options.microbatches,
                                                  std::max<int64_t>(options.node_limit / 16, 1000));
  alternatives.Compare("serial",
                       serial.has_value()
                           ? absl::StatusOr<Schedule>(*std::move(serial))
                           : absl::StatusOr<Schedule>(absl::FailedPreconditionError(
                                 "no order of one micro-batch within the caps was found")),
                       true);
}

// Small problems: a branch and bound over every schedule below the best so far,
// compared as "exact" (nullopt where it does not run). When it covers every
// schedule it proves the best one optimal, or that no schedule exists (an error).
absl::StatusOr<std::optional<ExactScheduleResult>> CompareBranchAndBound(
    const BlockModel& model, const ModelFacts& facts, const SearchOptions& options,
    int64_t makespan_bound, Clock::time_point deadline, Alternatives& alternatives) {
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  const std::optional<SimResult>& best_sim = alternatives.best_sim();
  std::optional<ExactScheduleResult> exact;
  if (!options.compare_alternatives || instances > kExactInstances ||
      options.objective != Objective::kMakespan ||
      (best_sim.has_value() && best_sim->makespan == makespan_bound)) {
    return exact;
  }
  exact = BranchAndBoundSchedule(
      model, facts, options.microbatches,
      best_sim.has_value() ? best_sim->makespan : std::numeric_limits<int64_t>::max(),
      std::max<int64_t>(std::min(options.node_limit / 2, kExactWork / instances), 1000),
      deadline);
  if (exact->schedule.has_value()) {
    // Its proofs rest on its own timing: the simulator must agree with it.
    absl::StatusOr<SimResult> check = Simulate(model, *exact->schedule);
    LOOM_RET_CHECK(check.ok() && check->valid && check->makespan == exact->makespan)
        << "the branch and bound's schedule does not simulate as it says";
    alternatives.Compare("exact", *exact->schedule, true);
  } else {
    alternatives.Compare(
        "exact",
        absl::FailedPreconditionError(exact->exhaustive
                                          ? "no schedule is shorter than the best of the others"
                                          : "none shorter found within the search's limits"),
        true);
  }
  if (exact->exhaustive && !best_sim.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block model '", model.name, "': no schedule of ", options.microbatches,
        " micro-batches keeps within the memory caps (proved: a branch and bound over "
        "every order of the devices found none)"));
  }
  return exact;
}

// The repetend search, unless another schedule is `settled` (proved optimal): then
// the repetend is searched only for its period, on a budget that shrinks as blocks
// make each node dearer, and not at all above kSettledBlocks blocks, where a node
// costs milliseconds.
absl::StatusOr<SearchResult> SearchRepetendUnlessSettled(const BlockModel& model,
                                                         const ModelFacts& facts,
                                                         const SearchOptions& options,
                                                         bool settled, Clock::time_point started) {
  constexpr int kSettledBlocks = 1024;
  SearchOptions repetend_options = options;
  if (settled) {
    // A node costs about a pass over the blocks: 16 million block visits by default,
    // and at most a sixteenth of the node limit.
    repetend_options.node_limit = std::max<int64_t>(
        1000, std::min(options.node_limit / 16, options.node_limit * 8 / model.num_blocks()));
  }
  if (settled && model.num_blocks() > kSettledBlocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not searched: another schedule meets the ", ObjectiveName(options.objective),
        "'s lower bound, and a "
        "repetend of ", model.num_blocks(), " blocks would cost more than it adds"));
  }
  return SearchRepetend(model, facts, repetend_options, started);
}

// The result from the repetend `searched` (or why none was found) and the
// alternatives: the searched schedule unless another is shorter (ties go to the
// search); ResourceExhausted when neither gives a schedule.
absl::StatusOr<SearchResult> ChooseSchedule(const BlockModel& model,
                                            absl::StatusOr<SearchResult> searched,
                                            Alternatives& alternatives, const ModelFacts& facts,
                                            Objective objective, int64_t makespan_bound,
                                            bool settled) {
  SearchResult result;
  if (searched.ok() && objective == Objective::kSpan) {
    // The repetend's orders, timed for their least span.
    LOOM_ASSIGN_OR_RETURN(searched->schedule, TimeForLeastSpan(model, searched->schedule));
    LOOM_ASSIGN_OR_RETURN(searched->sim, Simulate(model, searched->schedule));
  }
  if (searched.ok()) {
    result = *std::move(searched);
    result.candidates.push_back(Candidate("search", result.sim));
  } else {
    result.period_lower_bound = facts.max_work;
    result.makespan_lower_bound = makespan_bound;
    result.gap_reason = std::string(searched.status().message());
    if (settled && searched.status().message().find("not searched") == absl::string_view::npos) {
      absl::StrAppend(&result.gap_reason,
                      " (on a reduced budget: another schedule is proved optimal)");
    }
    ScheduleCandidate none;
    none.name = "search";
    none.defined = true;
    none.why_not = result.gap_reason;
    result.candidates.push_back(none);
  }
  std::vector<ScheduleCandidate>& others = alternatives.candidates();
  std::vector<std::string> tried;
  for (const ScheduleCandidate& c : others) {
    if (c.defined) tried.push_back(c.name);
  }
  for (ScheduleCandidate& c : others) result.candidates.push_back(std::move(c));
  std::optional<SimResult>& best_sim = alternatives.best_sim();
  if (best_sim.has_value() &&
      (!searched.ok() ||
       ObjectiveValue(objective, *best_sim) < ObjectiveValue(objective, result.sim))) {
    result.schedule = *std::move(alternatives.best());
    result.sim = *std::move(best_sim);
  } else if (!searched.ok()) {
    if (others.empty()) return searched.status();
    return absl::ResourceExhaustedError(absl::StrCat(
        searched.status().message(), "; none of the other schedules tried (",
        absl::StrJoin(tried, ", "), ") fits the caps either"));
  }
  return result;
}

}  // namespace

absl::StatusOr<SearchResult> SearchSchedule(const BlockModel& model,
                                            const SearchOptions& options) {
  const auto started = Clock::now();
  const Clock::time_point deadline = DeadlineAfter(started, options.time_limit_seconds);
  LOOM_RETURN_IF_ERROR(ValidateSearchSize(model, options));
  LOOM_ASSIGN_OR_RETURN(ModelFacts facts, AnalyzeBlockModel(model));
  LOOM_RETURN_IF_ERROR(CheckCapsAdmitSchedule(model, facts, options.microbatches));
  const int64_t makespan_bound = MakespanLowerBound(facts, options.microbatches);
  const int64_t span_bound = facts.max_work * options.microbatches;
  const Objective objective = options.objective;
  Alternatives alternatives(model, objective);
  // Every alternative is a whole schedule, simulated: above this many instances
  // only the repetend is built.
  constexpr int64_t kAlternativeInstances = int64_t{1} << 22;
  const int64_t instances = int64_t{model.num_blocks()} * options.microbatches;
  if (options.compare_alternatives && instances <= kAlternativeInstances) {
    CompareAlternatives(model, facts, options, deadline, alternatives);
  }
  // Small problems: a local search over the best schedule's device orders, then a
  // branch and bound over every schedule below the best so far. They find the shorter
  // schedules the ramps of a few micro-batches allow (by makespan).
  if (options.compare_alternatives && instances <= kExactInstances &&
      objective == Objective::kMakespan &&
      alternatives.best().has_value() && alternatives.best_sim()->makespan > makespan_bound) {
    std::optional<Schedule> improved =
        ImproveOrders(model, *alternatives.best(),
                      std::max<int64_t>(1000, kLocalWork / instances), /*seed=*/1, deadline);
    if (improved.has_value()) alternatives.Compare("local", *std::move(improved), true);
  }
  LOOM_ASSIGN_OR_RETURN(std::optional<ExactScheduleResult> exact,
                        CompareBranchAndBound(model, facts, options, makespan_bound, deadline,
                                              alternatives));
  // A schedule meeting the objective's lower bound, or one the branch and bound
  // proved optimal, leaves no repetend better.
  const std::optional<SimResult>& best_sim = alternatives.best_sim();
  const bool settled =
      (best_sim.has_value() && objective == Objective::kMakespan &&
       best_sim->makespan == makespan_bound) ||
      (best_sim.has_value() && objective == Objective::kSpan && best_sim->span == span_bound) ||
      (exact.has_value() && exact->exhaustive);
  absl::StatusOr<SearchResult> searched =
      SearchRepetendUnlessSettled(model, facts, options, settled, started);
  if (!searched.ok() && !absl::IsResourceExhausted(searched.status())) return searched.status();
  LOOM_ASSIGN_OR_RETURN(SearchResult result,
                        ChooseSchedule(model, std::move(searched), alternatives, facts,
                                       objective, makespan_bound, settled));
  result.objective = objective;
  result.span_lower_bound = span_bound;
  result.span_optimal = result.sim.span == span_bound;
  if (result.sim.makespan == result.makespan_lower_bound) {
    result.makespan_optimal = true;
    result.makespan_proof = "it meets the makespan's lower bound";
  } else if (exact.has_value() && exact->exhaustive) {
    result.makespan_optimal = true;
    result.makespan_proof = absl::StrCat("a branch and bound over every schedule (",
                                         exact->nodes, " nodes) found none shorter");
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace loom::schedule
