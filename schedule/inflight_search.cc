#include "schedule/inflight_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "schedule/span_timing.h"

namespace loom::schedule {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

enum class Class { kBackward, kOther, kForward, kWeight };
constexpr int kClasses = 4;
// Instances in the rule's order of preference: (micro-batch, order, id), sorted. A
// sorted vector: instances mostly arrive oldest first and leave oldest first, and a
// device rarely knows more than a few hundred.
class Known {
 public:
  using Key = std::tuple<int, int, int64_t>;
  void insert(const Key& key) { keys_.insert(std::upper_bound(keys_.begin(), keys_.end(), key), key); }
  void erase(const Key& key) {
    auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
    if (it != keys_.end() && *it == key) keys_.erase(it);
  }
  std::vector<Key>::const_iterator begin() const { return keys_.begin(); }
  std::vector<Key>::const_iterator end() const { return keys_.end(); }

 private:
  std::vector<Key> keys_;
};
using MinHeap = std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>>;

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
  // `prefix`, when given, per device: the instances it runs first, in that order,
  // before the rule decides.
  InFlightRule(const BlockModel& model, const ModelFacts& facts, int microbatches,
               const InFlightLimits& limits,
               const std::vector<std::vector<Instance>>* prefix = nullptr)
      : model_(model),
        facts_(facts),
        limits_(limits),
        n_(model.num_blocks()),
        microbatches_(microbatches),
        total_(int64_t{n_} * microbatches),
        waiting_(total_),
        ready_at_(total_, 0),
        order_(model.num_devices),
        free_at_(model.num_devices, 0),
        held_(model.num_devices, 0),
        in_flight_(model.num_devices, 0),
        started_(model.num_devices, std::vector<int>(microbatches, 0)),
        forwards_(model.num_devices, 0),
        backwards_(model.num_devices, 0),
        wake_(model.num_devices, kNever),
        known_(model.num_devices),
        known_count_(model.num_devices, 0),
        arrivals_(model.num_devices),
        weight_arrivals_(model.num_devices),
        unplaced_work_(model.num_devices, 0),
        busy_(model.num_devices, false),
        first_start_(model.num_devices, 0),
        prefix_(prefix),
        prefix_done_(model.num_devices, 0),
        idle_(model.num_devices, 0) {
    for (const Block& block : model.blocks) {
      const int d = block.devices.front();
      if (ClassOf(block.kind) == Class::kForward) ++forwards_[d];
      if (ClassOf(block.kind) == Class::kBackward) ++backwards_[d];
      if (ClassOf(block.kind) != Class::kWeight) unplaced_work_[d] += microbatches;
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
        if (known_count_[d] > 0) WakeAt(d, free_at_[d]);
        continue;
      }
      // Nothing may start now: wait for the next instance to become ready here
      // (one placed later wakes the device when it becomes known).
      const int64_t next = std::min(NextArrival(d, now), NextWeightArrival(d, now));
      if (next != kNever) WakeAt(d, next);
    }
    if (placed != total_) return std::nullopt;  // the caps or limits stopped every device
    // The rule's own times are those of its orders as soon as possible.
    int64_t first = kNever, last = 0;
    span_ = 0;
    for (int d = 0; d < model_.num_devices; ++d) {
      if (!busy_[d]) continue;
      first = std::min(first, first_start_[d]);
      last = std::max(last, free_at_[d]);
      span_ = std::max(span_, free_at_[d] - first_start_[d]);
    }
    makespan_ = last - first;
    // A device places its instances in the order of their start times.
    Schedule s;
    s.microbatches = microbatches_;
    s.order = std::move(order_);
    s.name = "inflight";
    return s;
  }

  // After Run: the makespan and span of the rule's timing.
  int64_t makespan() const { return makespan_; }
  int64_t span() const { return span_; }

 private:
  void WakeAt(int d, int64_t t) {
    t = std::max(t, free_at_[d]);
    if (t < wake_[d]) {
      wake_[d] = t;
      events_.push({t, d});
    }
  }

  // Each class's instances in the order the rule prefers them: the oldest
  // micro-batch first, then for a forward the later stage (a micro-batch that
  // reached this device runs on toward the loss first), else the block id.
  static std::tuple<int, int, int64_t> KeyOf(int64_t id, int n, Class c) {
    const int b = static_cast<int>(id % n);
    return {static_cast<int>(id / n), c == Class::kForward ? -b : b, id};
  }

  void Know(int64_t id) {
    const Block& block = model_.blocks[id % n_];
    const int d = block.devices.front();
    const Class c = ClassOf(block.kind);
    known_[d][static_cast<int>(c)].insert(KeyOf(id, n_, c));
    ++known_count_[d];
    (c == Class::kWeight ? weight_arrivals_ : arrivals_)[d].push(ready_at_[id]);
    WakeAt(d, ready_at_[id]);
  }

  bool Fits(int d, const Block& block) const {
    return !model_.has_cap() || held_[d] + block.memory <= model_.memory_cap[d];
  }

  // The earliest time a forward or backward known on device `d` but not ready at
  // `now` becomes ready (kNever when none is on its way). A device's decision times
  // never decrease, so arrivals at or before `now` are dropped for good.
  int64_t NextArrival(int d, int64_t now) { return NextOf(arrivals_[d], now); }
  int64_t NextWeightArrival(int d, int64_t now) { return NextOf(weight_arrivals_[d], now); }
  static int64_t NextOf(MinHeap& heap, int64_t now) {
    while (!heap.empty() && heap.top() <= now) heap.pop();
    return heap.empty() ? kNever : heap.top();
  }

  // The instance device `d` starts at `now`, or -1.
  int64_t Choose(int d, int64_t now) {
    if (prefix_ != nullptr && prefix_done_[d] < (*prefix_)[d].size()) {
      const Instance& x = (*prefix_)[d][prefix_done_[d]];
      const int64_t id = int64_t{x.microbatch} * n_ + x.block;
      return waiting_[id] == 0 && ready_at_[id] <= now ? id : -1;  // else wait for it
    }
    const std::array<Known, kClasses>& known = known_[d];
    // The oldest ready backward (or another block) that fits.
    int64_t backward = -1;
    for (Class c : {Class::kBackward, Class::kOther}) {
      for (const auto& [m, sub, id] : known[static_cast<int>(c)]) {
        if (ready_at_[id] <= now && Fits(d, model_.blocks[id % n_])) {
          backward = id;
          break;
        }
      }
      if (backward >= 0) break;
    }
    // The oldest ready forward, unless the limit or the cap holds it back. The limit
    // counts micro-batches: a forward of one already in flight here (a later chunk)
    // is never held back by it.
    const WeightPolicy policy = limits_.weights[d];
    bool weights_allowed = policy != WeightPolicy::kDefer || unplaced_work_[d] == 0;
    int64_t forward = -1;
    for (const auto& [m, sub, id] : known[static_cast<int>(Class::kForward)]) {
      if (ready_at_[id] > now) continue;
      const bool held = started_[d][m] == 0 && in_flight_[d] >= limits_.microbatches[d];
      if (!held && Fits(d, model_.blocks[id % n_])) {
        forward = id;
      } else {
        weights_allowed = true;  // a forward waits: a deferred W may run
      }
      break;
    }
    if (limits_.forward_first && forward >= 0) return forward;
    if (backward >= 0) return backward;
    if (policy != WeightPolicy::kEager && forward >= 0) return forward;
    // The oldest weight gradient ready, when the policy lets it run.
    for (const auto& [m, sub, id] : known[static_cast<int>(Class::kWeight)]) {
      if (ready_at_[id] > now) continue;
      if (policy == WeightPolicy::kEager) return id;
      if (!weights_allowed) break;
      if (policy == WeightPolicy::kFitGaps || policy == WeightPolicy::kBalanceGaps) {
        const int64_t next_arrival = NextArrival(d, now);
        const bool delays =
            unplaced_work_[d] > 0 && now + model_.blocks[id % n_].span > next_arrival;
        if (delays && policy == WeightPolicy::kFitGaps) {
          break;  // it would delay work on its way: wait for that instead
        }
        if (delays && policy == WeightPolicy::kBalanceGaps && next_arrival != kNever &&
            idle_[d] + (next_arrival - now) <= most_idle_) {
          break;  // waiting keeps this device within the longest idle so far
        }
      }
      return id;
    }
    return forward;
  }

  void Place(int64_t id, int d, int64_t now) {
    const Block& block = model_.blocks[id % n_];
    if (prefix_ != nullptr && prefix_done_[d] < (*prefix_)[d].size()) ++prefix_done_[d];
    if (busy_[d]) {
      idle_[d] += now - free_at_[d];
      most_idle_ = std::max(most_idle_, idle_[d]);
    } else {
      first_start_[d] = now;
    }
    busy_[d] = true;
    order_[d].push_back(Instance{static_cast<int>(id % n_), static_cast<int>(id / n_)});
    free_at_[d] = now + block.span;
    held_[d] += block.memory;
    const Class c = ClassOf(block.kind);
    if (c != Class::kWeight) --unplaced_work_[d];
    int& started = started_[d][id / n_];
    if (c == Class::kForward && started++ == 0) ++in_flight_[d];
    if (c == Class::kBackward && ++started == forwards_[d] + backwards_[d] && forwards_[d] > 0) {
      --in_flight_[d];  // its last backward here
    }
    known_[d][static_cast<int>(c)].erase(KeyOf(id, n_, c));
    --known_count_[d];
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
  const InFlightLimits& limits_;
  const int n_;
  const int microbatches_;
  const int64_t total_;
  std::vector<int> waiting_;        // predecessors not placed
  std::vector<int64_t> ready_at_;   // latest predecessor end + lag
  std::vector<std::vector<Instance>> order_;  // per device
  std::vector<int64_t> free_at_;    // per device
  std::vector<int64_t> held_;       // per device
  std::vector<int> in_flight_;      // per device: micro-batches in flight (see started_)
  // Per device and micro-batch: forwards and backwards (B, I) started; in flight
  // from its first forward here until its last backward here starts.
  std::vector<std::vector<int>> started_;
  std::vector<int> forwards_;       // per device: forward blocks of one micro-batch
  std::vector<int> backwards_;      // per device: backward blocks of one micro-batch
  std::vector<int64_t> wake_;       // per device: its pending event's time
  // Per device and class: the instances whose predecessors are placed, in the order
  // the rule prefers them.
  std::vector<std::array<Known, kClasses>> known_;
  std::vector<int64_t> known_count_;
  // Per device: the ready times of its known instances, forwards and backwards apart
  // from weight gradients (entries at or before a decision time are dropped then).
  std::vector<MinHeap> arrivals_;
  std::vector<MinHeap> weight_arrivals_;
  std::vector<int64_t> unplaced_work_;  // per device: forwards and backwards not placed
  std::vector<bool> busy_;              // per device: has started a block
  std::vector<int64_t> first_start_;    // per device, once busy
  int64_t makespan_ = 0;
  int64_t span_ = 0;
  const std::vector<std::vector<Instance>>* prefix_;
  std::vector<size_t> prefix_done_;  // per device: prefix instances placed
  std::vector<int64_t> idle_;           // per device: time idle since its first block
  int64_t most_idle_ = 0;               // of any device
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>,
                      std::greater<>>
      events_;
};

// The limits are usable on the model: one entry per device, each limit >= 1, every
// block on one device.
bool Applies(const BlockModel& model, const InFlightLimits& limits) {
  if (static_cast<int>(limits.microbatches.size()) != model.num_devices ||
      static_cast<int>(limits.weights.size()) != model.num_devices) {
    return false;
  }
  for (int limit : limits.microbatches) {
    if (limit < 1) return false;
  }
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return false;
  }
  return true;
}

// Per device, how many micro-batches' forwards fit between its first forward of a
// micro-batch and that micro-batch's last backward on it, on the model's critical
// paths (at least 1): the micro-batches that must be in flight for the device
// never to wait.
std::vector<double> ForwardsBeforeBackward(const BlockModel& model, const ModelFacts& facts) {
  std::vector<double> r(model.num_devices, 1.0);
  for (int d = 0; d < model.num_devices; ++d) {
    int64_t first_forward = kNever, last_backward = -1, forward_work = 0;
    for (int b : facts.on_device[d]) {
      const Block& block = model.blocks[b];
      if (ClassOf(block.kind) == Class::kForward) {
        first_forward = std::min(first_forward, facts.head[b]);
        forward_work += block.span;
      } else if (ClassOf(block.kind) == Class::kBackward) {
        last_backward = std::max(last_backward, facts.head[b]);
      }
    }
    if (forward_work > 0 && last_backward > first_forward) {
      r[d] = std::max(1.0, static_cast<double>(last_backward - first_forward) / forward_work);
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
  bool Try(const InFlightLimits& limits) {
    if (Exhausted()) return false;
    ++evaluations_;
    if (!Applies(model_, limits)) return false;
    InFlightRule rule(model_, facts_, microbatches_, limits);
    if (!rule.Run().has_value()) return false;
    const int64_t value = objective_ == Objective::kSpan ? rule.span() : rule.makespan();
    finalists_.push_back({value, limits});
    std::stable_sort(finalists_.begin(), finalists_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (finalists_.size() > kFinalists) finalists_.pop_back();
    if (found() && value >= best_value_) return false;
    best_ = limits;
    best_value_ = value;
    return true;
  }

  const InFlightLimits& best() const { return best_; }
  bool found() const { return !best_.microbatches.empty(); }

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
  InFlightLimits best_;
  int64_t best_value_ = 0;
  std::vector<std::pair<int64_t, InFlightLimits>> finalists_;  // best first
};

}  // namespace

std::optional<Schedule> InFlightSchedule(const BlockModel& model, const ModelFacts& facts,
                                         int microbatches, const InFlightLimits& limits) {
  if (!Applies(model, limits)) return std::nullopt;
  return InFlightRule(model, facts, microbatches, limits).Run();
}

std::string WeightPolicyName(WeightPolicy policy) {
  switch (policy) {
    case WeightPolicy::kFillGaps: return "fill";
    case WeightPolicy::kFitGaps: return "fit";
    case WeightPolicy::kDefer: return "defer";
    case WeightPolicy::kBalanceGaps: return "balance";
    case WeightPolicy::kEager: return "eager";
  }
  return "?";
}

std::optional<Schedule> CompleteCooldown(const BlockModel& model, const ModelFacts& facts,
                                         const Schedule& schedule, WeightPolicy policy) {
  InFlightLimits limits{std::vector<int>(model.num_devices, schedule.microbatches),
                        std::vector<WeightPolicy>(model.num_devices, policy), false};
  if (!Applies(model, limits)) return std::nullopt;
  std::vector<std::vector<Instance>> prefix(model.num_devices);
  for (int d = 0; d < model.num_devices && d < static_cast<int>(schedule.order.size()); ++d) {
    const std::vector<Instance>& order = schedule.order[d];
    size_t tail = 0;  // just after the last forward
    for (size_t i = 0; i < order.size(); ++i) {
      if (ClassOf(model.blocks[order[i].block].kind) == Class::kForward) tail = i + 1;
    }
    prefix[d].assign(order.begin(), order.begin() + tail);
  }
  std::optional<Schedule> s =
      InFlightRule(model, facts, schedule.microbatches, limits, &prefix).Run();
  if (s.has_value()) s->name = absl::StrCat(schedule.name, "/cooldown-", WeightPolicyName(policy));
  return s;
}

std::optional<InFlightSearchResult> SearchInFlightLimits(
    const BlockModel& model, const ModelFacts& facts, int microbatches, Objective objective,
    int max_evaluations, std::chrono::steady_clock::time_point deadline) {
  for (const Block& block : model.blocks) {
    if (block.devices.size() != 1) return std::nullopt;
  }
  const std::vector<double> r = ForwardsBeforeBackward(model, facts);
  auto family = [&](double a, int c, WeightPolicy policy) {
    InFlightLimits limits;
    limits.microbatches.resize(model.num_devices);
    limits.weights.assign(model.num_devices, policy);
    for (int d = 0; d < model.num_devices; ++d) {
      limits.microbatches[d] =
          std::clamp(static_cast<int>(std::lround(a * r[d])) + c, 1, microbatches);
    }
    return limits;
  };
  LimitSearch search(model, facts, microbatches, objective, max_evaluations, deadline);
  // From the 1F1B-like end of the family (least memory) up to twice ZB-H2's.
  for (double a : {0.5, 1.0, 0.75, 1.25, 1.5, 2.0}) {
    for (int c : {0, 1}) {
      for (WeightPolicy policy :
           {WeightPolicy::kFillGaps, WeightPolicy::kFitGaps, WeightPolicy::kDefer,
            WeightPolicy::kBalanceGaps, WeightPolicy::kEager}) {
        search.Try(family(a, c, policy));
      }
    }
  }
  // Then local moves while they improve: device by device a step of its limit (the
  // cheapest neighbourhood first), then each other W policy per device, then every
  // device's limit a step at once or the other backward-forward order.
  auto try_move = [&](int d, int step, int policy_turn) {
    InFlightLimits limits = search.best();
    int& limit = limits.microbatches[d];
    limit += step;
    if (limit < 1 || limit > microbatches) return false;
    WeightPolicy& w = limits.weights[d];
    w = static_cast<WeightPolicy>((static_cast<int>(w) + policy_turn) % kWeightPolicies);
    return search.Try(limits);
  };
  bool improved = search.found();
  while (improved && !search.Exhausted()) {
    improved = false;
    for (int d = 0; d < model.num_devices && !search.Exhausted(); ++d) {
      improved |= try_move(d, 1, 0) || try_move(d, -1, 0);
    }
    if (improved) continue;
    for (int d = 0; d < model.num_devices && !search.Exhausted(); ++d) {
      for (int turn = 1; turn < kWeightPolicies && !search.Exhausted(); ++turn) {
        if (try_move(d, 0, turn)) {
          improved = true;
          break;
        }
      }
    }
    if (improved) continue;
    for (int step : {1, -1, 0}) {
      InFlightLimits limits = search.best();
      for (int& limit : limits.microbatches) limit = std::clamp(limit + step, 1, microbatches);
      if (step == 0) limits.forward_first = !limits.forward_first;
      improved |= search.Try(limits);
    }
  }
  return search.Result();
}

}  // namespace loom::schedule
