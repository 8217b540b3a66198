#include "schedule/span_timing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::schedule {
namespace {

// The difference constraints of fixed device orders: start[to] >= start[from] + weight
// along the dependencies and each device's order (acyclic once the orders can run),
// and, per device, start[first] >= start[last] + span(last) - S.
class SpanConstraints {
 public:
  SpanConstraints(const BlockModel& model, const Schedule& schedule,
                  const std::vector<int64_t>& asap)
      : n_(model.num_blocks()), total_(asap.size()) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> incoming(total_);
    for (int64_t id = 0; id < total_; ++id) {
      const int64_t base = id - id % n_;
      for (const Dep& p : model.blocks[id % n_].preds) {
        incoming[id].push_back({base + p.block, model.blocks[p.block].span + p.lag});
      }
    }
    for (const std::vector<Instance>& order : schedule.order) {
      for (size_t i = 0; i < order.size(); ++i) {
        const int64_t id = int64_t{order[i].microbatch} * n_ + order[i].block;
        if (i > 0) {
          const int64_t prev = int64_t{order[i - 1].microbatch} * n_ + order[i - 1].block;
          incoming[id].push_back({prev, model.blocks[order[i - 1].block].span});
        }
      }
      if (order.empty()) continue;
      const Instance& last = order.back();
      wraps_.push_back({int64_t{order.front().microbatch} * n_ + order.front().block,
                        int64_t{last.microbatch} * n_ + last.block,
                        model.blocks[last.block].span});
    }
    // Every edge of weight >= 1 goes forward in time at the as-soon-as-possible
    // times, so ordering by them is a topological order.
    sequence_.resize(total_);
    std::iota(sequence_.begin(), sequence_.end(), 0);
    std::stable_sort(sequence_.begin(), sequence_.end(),
                     [&](int64_t a, int64_t b) { return asap[a] < asap[b]; });
    offset_.assign(total_ + 1, 0);
    for (int64_t id = 0; id < total_; ++id) offset_[id + 1] = offset_[id] + incoming[id].size();
    edges_.reserve(offset_[total_]);
    for (auto& in : incoming) edges_.insert(edges_.end(), in.begin(), in.end());
  }

  // The least span any timing of these orders can give a device, counting one
  // device at a time: its longest path from its first block's start to its last
  // block's start, plus the last block's span. The least span for all devices
  // together is at least this (and often equal).
  int64_t SingleDeviceBound() const {
    int64_t bound = 0;
    std::vector<int64_t> reach(total_);
    std::vector<int64_t> position(total_);
    for (size_t i = 0; i < sequence_.size(); ++i) position[sequence_[i]] = static_cast<int64_t>(i);
    for (const Wrap& w : wraps_) {
      constexpr int64_t kUnreached = std::numeric_limits<int64_t>::min();
      std::fill(reach.begin(), reach.end(), kUnreached);
      reach[w.first] = 0;
      for (int64_t i = position[w.first] + 1; i <= position[w.last]; ++i) {
        const int64_t id = sequence_[i];
        int64_t t = kUnreached;
        for (int64_t e = offset_[id]; e < offset_[id + 1]; ++e) {
          if (reach[edges_[e].first] != kUnreached) {
            t = std::max(t, reach[edges_[e].first] + edges_[e].second);
          }
        }
        reach[id] = t;
      }
      bound = std::max(bound, reach[w.last] + w.last_span);
    }
    return bound;
  }

  // The earliest start times keeping every device's span within `limit`, or false
  // when none do (a positive cycle: some device cannot fit in `limit`). `start`
  // comes in as a lower bound of them (zeros, or the times for a larger limit).
  bool Solve(int64_t limit, std::vector<int64_t>& start) const {
    // A simple path crosses each device's wrap at most once: one round more than
    // there are wraps settles any feasible system.
    for (size_t round = 0; round <= wraps_.size() + 1; ++round) {
      for (int64_t id : sequence_) {
        int64_t t = start[id];
        for (int64_t e = offset_[id]; e < offset_[id + 1]; ++e) {
          t = std::max(t, start[edges_[e].first] + edges_[e].second);
        }
        start[id] = t;
      }
      bool changed = false;
      for (const Wrap& w : wraps_) {
        const int64_t earliest = start[w.last] + w.last_span - limit;
        if (earliest > start[w.first]) {
          start[w.first] = earliest;
          changed = true;
        }
      }
      if (!changed) return true;
    }
    return false;
  }

 private:
  struct Wrap {
    int64_t first = 0;
    int64_t last = 0;
    int64_t last_span = 0;
  };
  int64_t n_;
  int64_t total_;
  std::vector<int64_t> sequence_;
  std::vector<int64_t> offset_;
  std::vector<std::pair<int64_t, int64_t>> edges_;  // (from, weight), grouped by target
  std::vector<Wrap> wraps_;
};

}  // namespace

absl::StatusOr<Schedule> TimeForLeastSpan(const BlockModel& model, const Schedule& schedule) {
  Schedule asap_form = schedule;
  asap_form.start.clear();
  absl::StatusOr<SimResult> asap = Simulate(model, asap_form);
  if (!asap.ok()) return asap.status();
  if (asap->start.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the schedule's orders cannot be timed: ", asap->violation));
  }
  const SpanConstraints constraints(model, schedule, asap->start);
  // Feasible at the as-soon-as-possible span (where the as-soon-as-possible times
  // are the earliest); never below the bound of each device alone, often equal to it.
  int64_t hi = asap->span;
  int64_t lo = std::min(hi, constraints.SingleDeviceBound());
  std::vector<int64_t> best = asap->start, trial;
  if (lo < hi) {
    trial = best;
    if (constraints.Solve(lo, trial)) {
      hi = lo;
      best.swap(trial);
    } else {
      ++lo;
    }
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    // The earliest times for a larger limit are below those for `mid`.
    trial = best;
    if (constraints.Solve(mid, trial)) {
      hi = mid;
      best.swap(trial);
    } else {
      lo = mid + 1;
    }
  }
  Schedule timed = schedule;
  timed.start = std::move(best);
  return timed;
}

}  // namespace loom::schedule
