#include "schedule/inflight_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "schedule/span_timing.h"

namespace loom::schedule {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

enum class Class { kBackward, kOther, kForward, kWeight };

Class ClassOf(BlockKind kind) {
  switch (kind) {
    case BlockKind::kBackward:
    case BlockKind::kBackwardInput:
      return Class::kBackward;
    case BlockKind::kForward:
      return Class::kForward;
    case BlockKind::kBackwardWeight:
      return Class::kWeight;
    case BlockKind::kOther:
      break;
  }
  return Class::kOther;
}

// The rule run as an event simulation: devices decide in the order of the times
// they become free, so when one decides, every instance that can be ready on it
// by then is known (any instance placed later starts no earlier).
class InFlightRule {
 public:
  InFlightRule(const BlockModel& model, const ModelFacts& facts, int microbatches,
               const std::vector<int>& limits)
      : model_(model),
        facts_(facts),
        limits_(limits),
        n_(model.num_blocks()),
        microbatches_(microbatches),
        total_(int64_t{n_} * microbatches),
        waiting_(total_),
        ready_at_(total_, 0),
        start_(total_, -1),
        free_at_(model.num_devices, 0),
        held_(model.num_devices, 0),
        in_flight_(model.num_devices, 0),
        started_(model.num_devices, std::vector<int>(microbatches, 0)),
        forwards_(model.num_devices, 0),
        backwards_(model.num_devices, 0),
        wake_(model.num_devices, kNever),
        known_(model.num_devices) {
    for (const Block& block : model.blocks) {
      if (ClassOf(block.kind) == Class::kForward) ++forwards_[block.devices.front()];
      if (ClassOf(block.kind) == Class::kBackward) ++backwards_[block.devices.front()];
    }
  }

  std::optional<Schedule> Run() {
    for (int64_t id = 0; id < total_; ++id) {
      waiting_[id] = static_cast<int>(model_.blocks[id % n_].preds.size());
      if (waiting_[id] == 0) Know(id);
    }
    int64_t placed = 0;
    while (!events_.empty()) {
      const auto [t, d] = events_.top();
      events_.pop();
      if (t != wake_[d]) continue;  // superseded by an earlier wake
      wake_[d] = kNever;
      const int64_t now = std::max(t, free_at_[d]);
      const int64_t chosen = Choose(d, now);
      if (chosen >= 0) {
        Place(chosen, d, now);
        ++placed;
        if (!known_[d].empty()) WakeAt(d, free_at_[d]);
        continue;
      }
      // Nothing may start now: wait for the next instance to become ready here
      // (one placed later wakes the device when it becomes known).
      int64_t next = kNever;
      for (int64_t id : known_[d]) {
        if (ready_at_[id] > now) next = std::min(next, ready_at_[id]);
      }
      if (next != kNever) WakeAt(d, next);
    }
    if (placed != total_) return std::nullopt;  // the caps or limits stopped every device
    Schedule s = ScheduleFromTimes(model_, microbatches_, start_);
    s.name = "inflight";
    return s;
  }

 private:
  void WakeAt(int d, int64_t t) {
    t = std::max(t, free_at_[d]);
    if (t < wake_[d]) {
      wake_[d] = t;
      events_.push({t, d});
    }
  }

  void Know(int64_t id) {
    const int d = model_.blocks[id % n_].devices.front();
    known_[d].push_back(id);
    WakeAt(d, ready_at_[id]);
  }

  bool Fits(int d, const Block& block) const {
    return !model_.has_cap() || held_[d] + block.memory <= model_.memory_cap[d];
  }

  // The instance device `d` starts at `now`, or -1.
  int64_t Choose(int d, int64_t now) const {
    int64_t best = -1;
    std::tuple<int, int, int> best_key;
    for (int64_t id : known_[d]) {
      if (ready_at_[id] > now) continue;
      const Block& block = model_.blocks[id % n_];
      const Class c = ClassOf(block.kind);
      if (!Fits(d, block)) continue;
      // The limit counts micro-batches: a forward of one already in flight here
      // (a later chunk) is never held back by it.
      if (c == Class::kForward && started_[d][id / n_] == 0 && in_flight_[d] >= limits_[d]) {
        continue;
      }
      // The class, the oldest micro-batch, then the later stage of a forward (so
      // a micro-batch that reached this device runs on toward the loss first).
      const int m = static_cast<int>(id / n_);
      const int b = static_cast<int>(id % n_);
      const std::tuple<int, int, int> key{static_cast<int>(c), m,
                                          c == Class::kForward ? -b : b};
      if (best < 0 || key < best_key) {
        best = id;
        best_key = key;
      }
    }
    return best;
  }

  void Place(int64_t id, int d, int64_t now) {
    const Block& block = model_.blocks[id % n_];
    start_[id] = now;
    free_at_[d] = now + block.span;
    held_[d] += block.memory;
    const Class c = ClassOf(block.kind);
    int& started = started_[d][id / n_];
    if (c == Class::kForward && started++ == 0) ++in_flight_[d];
    if (c == Class::kBackward && ++started == forwards_[d] + backwards_[d] && forwards_[d] > 0) {
      --in_flight_[d];  // its last backward here
    }
    std::vector<int64_t>& known = known_[d];
    known.erase(std::find(known.begin(), known.end(), id));
    const int64_t base = id - id % n_;
    for (int s : facts_.succs[id % n_]) {
      const int64_t next = base + s;
      for (const Dep& p : model_.blocks[s].preds) {
        if (p.block == id % n_) {
          ready_at_[next] = std::max(ready_at_[next], now + block.span + p.lag);
        }
      }
      if (--waiting_[next] == 0) Know(next);
    }
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const std::vector<int>& limits_;
  const int n_;
  const int microbatches_;
  const int64_t total_;
  std::vector<int> waiting_;        // predecessors not placed
  std::vector<int64_t> ready_at_;   // latest predecessor end + lag
  std::vector<int64_t> start_;
  std::vector<int64_t> free_at_;    // per device
  std::vector<int64_t> held_;       // per device
  std::vector<int> in_flight_;      // per device: micro-batches in flight (see started_)
  // Per device and micro-batch: forwards and backwards (B, I) started; in flight
  // from its first forward here until its last backward here starts.
  std::vector<std::vector<int>> started_;
  std::vector<int> forwards_;       // per device: forward blocks of one micro-batch
  std::vector<int> backwards_;      // per device: backward blocks of one micro-batch
  std::vector<int64_t> wake_;       // per device: its pending event's time
  std::vector<std::vector<int64_t>> known_;  // per device: placeable instances
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>,
                      std::greater<>>
      events_;
};

// Per device, how many of its forwards fit between its first forward of a
// micro-batch and that micro-batch's first backward on it (at least 1).
std::vector<double> ForwardsBeforeBackward(const BlockModel& model, const ModelFacts& facts) {
  std::vector<double> r(model.num_devices, 1.0);
  for (int d = 0; d < model.num_devices; ++d) {
    int64_t first_forward = kNever, first_backward = kNever, forward_work = 0;
    for (int b : facts.on_device[d]) {
      const Block& block = model.blocks[b];
      if (ClassOf(block.kind) == Class::kForward) {
        first_forward = std::min(first_forward, facts.head[b]);
        forward_work += block.span;
      } else if (ClassOf(block.kind) == Class::kBackward) {
        first_backward = std::min(first_backward, facts.head[b]);
      }
    }
    if (forward_work > 0 && first_backward != kNever && first_backward > first_forward) {
      r[d] = std::max(1.0, static_cast<double>(first_backward - first_forward) / forward_work);
    }
  }
  return r;
}

// Builds and measures schedules for limit vectors, keeping the best. For kSpan the
// limits are compared by the span of the rule's own timing (as soon as possible),
// and only the few best are timed for their least span at the end: that timing costs
// a longest-path computation per bisection step.
class LimitSearch {
 public:
  LimitSearch(const BlockModel& model, const ModelFacts& facts, int microbatches,
              Objective objective, int max_evaluations,
              std::chrono::steady_clock::time_point deadline)
      : model_(model),
        facts_(facts),
        microbatches_(microbatches),
        objective_(objective),
        max_evaluations_(max_evaluations),
        deadline_(deadline) {}

  bool Exhausted() const {
    return evaluations_ >= max_evaluations_ ||
           (evaluations_ > 0 && std::chrono::steady_clock::now() > deadline_);
  }

  // Whether `limits` gave a schedule better than the best so far.
  bool Try(const std::vector<int>& limits) {
    if (Exhausted()) return false;
    ++evaluations_;
    std::optional<Schedule> made = InFlightSchedule(model_, facts_, microbatches_, limits);
    if (!made.has_value()) return false;
    absl::StatusOr<SimResult> sim = Simulate(model_, *made);
    if (!sim.ok() || !sim->valid) return false;
    const int64_t value = ObjectiveValue(objective_, *sim);
    finalists_.push_back({value, limits});
    std::sort(finalists_.begin(), finalists_.end());
    if (finalists_.size() > kFinalists) finalists_.pop_back();
    if (!best_.empty() && value >= best_value_) return false;
    best_ = limits;
    best_value_ = value;
    return true;
  }

  const std::vector<int>& best() const { return best_; }
  bool found() const { return !best_.empty(); }

  // The best schedule: for kSpan, of the finalists each timed for its least span.
  std::optional<InFlightSearchResult> Result() const {
    std::optional<InFlightSearchResult> kept;
    for (const auto& [value, limits] : finalists_) {
      std::optional<Schedule> made = InFlightSchedule(model_, facts_, microbatches_, limits);
      if (!made.has_value()) continue;
      if (objective_ == Objective::kSpan) {
        absl::StatusOr<Schedule> timed = TimeForLeastSpan(model_, *made);
        if (!timed.ok()) continue;
        made = *std::move(timed);
      }
      absl::StatusOr<SimResult> sim = Simulate(model_, *made);
      if (!sim.ok() || !sim->valid) continue;
      if (kept.has_value() &&
          ObjectiveValue(objective_, *sim) >= ObjectiveValue(objective_, kept->sim)) {
        continue;
      }
      kept = InFlightSearchResult{*std::move(made), *std::move(sim), limits, evaluations_};
      if (objective_ != Objective::kSpan) break;  // the finalists are already in order
    }
    return kept;
  }

 private:
  static constexpr size_t kFinalists = 4;
  const BlockModel& model_;
  const ModelFacts& facts_;
  const int microbatches_;
  const Objective objective_;
  const int max_evaluations_;
  const std::chrono::steady_clock::time_point deadline_;
  int evaluations_ = 0;
  std::vector<int> best_;
  int64_t best_value_ = 0;
  std::vector<std::pair<int64_t, std::vector<int>>> finalists_;  // best first
};

}  // namespace

std::optional<Schedule> InFlightSchedule(const BlockModel& model, const ModelFacts& facts,
                                         int microbatches, const std::vector<int>& limits) {
  if (static_cast<int>(limits.size()) != model.num_devices) return std::nullopt;
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return std::nullopt;
  }
  return InFlightRule(model, facts, microbatches, limits).Run();
}

std::optional<InFlightSearchResult> SearchInFlightLimits(
    const BlockModel& model, const ModelFacts& facts, int microbatches, Objective objective,
    int max_evaluations, std::chrono::steady_clock::time_point deadline) {
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return std::nullopt;
  }
  const std::vector<double> r = ForwardsBeforeBackward(model, facts);
  auto family = [&](double a, int c) {
    std::vector<int> limits(model.num_devices);
    for (int d = 0; d < model.num_devices; ++d) {
      limits[d] = std::clamp(static_cast<int>(std::lround(a * r[d])) + c, 1, microbatches);
    }
    return limits;
  };
  LimitSearch search(model, facts, microbatches, objective, max_evaluations, deadline);
  // From the 1F1B-like end of the family (least memory) up to twice ZB-H2's.
  for (double a : {0.5, 1.0, 0.75, 1.25, 1.5, 0.625, 0.875, 1.125, 2.0}) {
    for (int c : {0, 1, 2}) search.Try(family(a, c));
  }
  // Device by device, one step while it improves.
  bool improved = search.found();
  while (improved && !search.Exhausted()) {
    improved = false;
    for (int d = 0; d < model.num_devices && !search.Exhausted(); ++d) {
      for (int step : {1, -1}) {
        std::vector<int> limits = search.best();
        limits[d] += step;
        if (limits[d] < 1 || limits[d] > microbatches) continue;
        if (search.Try(limits)) {
          improved = true;
          break;
        }
      }
    }
  }
  return search.Result();
}

}  // namespace loom::schedule
