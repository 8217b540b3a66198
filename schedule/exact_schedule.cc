#include "schedule/exact_schedule.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

namespace loom::schedule {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

class BranchAndBound {
 public:
  BranchAndBound(const BlockModel& model, const ModelFacts& facts, int microbatches,
                 int64_t below, int64_t node_limit, Clock::time_point deadline)
      : model_(model),
        facts_(facts),
        n_(model.num_blocks()),
        total_(model.num_blocks() * microbatches),
        microbatches_(microbatches),
        best_(below),
        limit_(node_limit),
        deadline_(deadline) {}

  ExactScheduleResult Run() {
    start_.assign(total_, -1);
    ready_at_.assign(total_, 0);
    waiting_.assign(total_, 0);
    est_.assign(total_, 0);
    free_at_.assign(model_.num_devices, 0);
    held_.assign(model_.num_devices, 0);
    on_device_.assign(model_.num_devices, {});
    for (int m = 0; m < microbatches_; ++m) {
      for (int b : facts_.topo) {
        const int id = m * n_ + b;
        topo_.push_back(id);
        waiting_[id] = static_cast<int>(model_.blocks[b].preds.size());
        for (int d : model_.blocks[b].devices) on_device_[d].push_back(id);
      }
    }
    Dfs(/*placed=*/0, /*last_start=*/0, /*last_id=*/-1, /*max_end=*/0);
    ExactScheduleResult r;
    r.exhaustive = !stopped_;
    r.nodes = nodes_;
    if (!best_start_.empty()) {
      r.schedule = ScheduleFromTimes(model_, microbatches_, best_start_);
      r.schedule->name = "exact";
      r.makespan = best_;
    }
    return r;
  }

 private:
  bool Spend() {
    if (stopped_) return false;
    ++nodes_;
    if (nodes_ > limit_ || ((nodes_ & 255) == 0 && Clock::now() > deadline_)) stopped_ = true;
    return !stopped_;
  }

  int64_t Tail(int id) const { return facts_.tail[id % n_]; }
  int64_t Span(int id) const { return model_.blocks[id % n_].span; }

  // The earliest time instance `id` can start now: its placed predecessors and its
  // devices.
  int64_t Earliest(int id) const {
    int64_t t = ready_at_[id];
    for (int d : model_.blocks[id % n_].devices) t = std::max(t, free_at_[d]);
    return t;
  }

  // A lower bound on the makespan of every completion of the current partial
  // schedule, whose last instance started at `last_start` (instance `last_id`).
  // Stops early once it reaches the best known.
  int64_t LowerBound(int64_t last_start, int last_id, int64_t max_end) {
    int64_t lb = max_end;
    for (int id : topo_) {
      if (start_[id] >= 0) continue;
      const Block& block = model_.blocks[id % n_];
      // Instances are appended by (start, id): one below the last id starts later.
      int64_t e = std::max(Earliest(id), id < last_id ? last_start + 1 : last_start);
      // Copies of a block start in micro-batch order.
      if (id >= n_ && start_[id - n_] < 0) e = std::max(e, est_[id - n_] + block.span);
      const int base = id - id % n_;
      for (const Dep& p : block.preds) {
        const int pred = base + p.block;
        if (start_[pred] < 0) e = std::max(e, est_[pred] + Span(pred) + p.lag);
      }
      est_[id] = e;
      lb = std::max(lb, e + block.span + Tail(id));
    }
    if (lb >= best_) return lb;
    // Per device: the instances left, each released at its earliest start and
    // followed by its tail, on one machine with preemption allowed. Jackson's rule
    // (the largest tail first among those released) is optimal for that relaxation;
    // its value is the largest (least release + work + least tail) over every subset.
    for (const std::vector<int>& ids : on_device_) {
      scratch_.clear();
      for (int id : ids) {
        if (start_[id] < 0) scratch_.push_back({est_[id], Span(id), Tail(id)});
      }
      std::sort(scratch_.begin(), scratch_.end());
      ready_.clear();  // (tail, work left), a heap by tail
      int64_t t = 0;
      for (size_t i = 0; i < scratch_.size() || !ready_.empty();) {
        if (ready_.empty()) t = std::max(t, std::get<0>(scratch_[i]));
        while (i < scratch_.size() && std::get<0>(scratch_[i]) <= t) {
          ready_.push_back({std::get<2>(scratch_[i]), std::get<1>(scratch_[i])});
          std::push_heap(ready_.begin(), ready_.end());
          ++i;
        }
        std::pop_heap(ready_.begin(), ready_.end());
        auto& [tail, left] = ready_.back();
        const int64_t until =
            i < scratch_.size() ? std::min(t + left, std::get<0>(scratch_[i])) : t + left;
        left -= until - t;
        t = until;
        if (left == 0) {
          lb = std::max(lb, t + tail);
          ready_.pop_back();
        } else {
          std::push_heap(ready_.begin(), ready_.end());
        }
      }
      if (lb >= best_) return lb;
    }
    return lb;
  }

  // Records a complete schedule when it is the best so far.
  void Complete(int64_t max_end) {
    if (max_end < best_) {
      best_ = max_end;
      best_start_ = start_;
    }
  }

  void Dfs(int placed, int64_t last_start, int last_id, int64_t max_end) {
    if (placed == total_) return Complete(max_end);
    if (!Spend()) return;
    if (LowerBound(last_start, last_id, max_end) >= best_) return;
    std::vector<std::tuple<int64_t, int64_t, int>> next;
    Candidates(last_start, last_id, next);
    for (const auto& [t, neg_path, id] : next) {
      if (stopped_ || t + Span(id) + Tail(id) >= best_) continue;
      const size_t undo = undo_.size();
      Place(id, t);
      Dfs(placed + 1, t, id, std::max(max_end, t + Span(id)));
      Unplace(id, undo);
    }
  }

  // The instances that may come next after one started at `last_start` (instance
  // `last_id`), with their starts, in the order the search tries them: earliest
  // start first, then the longest path to the end of the micro-batch.
  void Candidates(int64_t last_start, int last_id,
                  std::vector<std::tuple<int64_t, int64_t, int>>& next) {
    next.clear();
    for (int id = 0; id < total_; ++id) {
      if (start_[id] >= 0 || waiting_[id] > 0) continue;
      const int64_t t = Earliest(id);
      if (t < last_start || (t == last_start && id < last_id)) continue;
      const Block& block = model_.blocks[id % n_];
      if (t + block.span + Tail(id) >= best_) continue;
      // Copies of a block start in micro-batch order.
      if (id >= n_ && start_[id - n_] < 0) continue;
      bool fits = true;
      if (model_.has_cap()) {
        for (int d : block.devices) fits = fits && held_[d] + block.memory <= model_.memory_cap[d];
      }
      if (fits) next.push_back({t, -(block.span + Tail(id)), id});
    }
    std::sort(next.begin(), next.end());
  }

  void Place(int id, int64_t t) {
    const Block& block = model_.blocks[id % n_];
    start_[id] = t;
    for (int d : block.devices) {
      undo_.push_back({-1 - d, free_at_[d]});
      free_at_[d] = t + block.span;
      held_[d] += block.memory;
    }
    const int base = id - id % n_;
    for (int s : facts_.succs[id % n_]) {
      const int next = base + s;
      undo_.push_back({next, ready_at_[next]});
      for (const Dep& p : model_.blocks[s].preds) {
        if (p.block == id % n_) ready_at_[next] = std::max(ready_at_[next], t + block.span + p.lag);
      }
      --waiting_[next];
    }
  }

  void Unplace(int id, size_t undo) {
    const Block& block = model_.blocks[id % n_];
    start_[id] = -1;
    for (int d : block.devices) held_[d] -= block.memory;
    while (undo_.size() > undo) {
      const auto [key, value] = undo_.back();
      undo_.pop_back();
      if (key < 0) {
        free_at_[-1 - key] = value;
      } else {
        ready_at_[key] = value;
        ++waiting_[key];
      }
    }
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const int n_;
  const int total_;
  const int microbatches_;
  int64_t best_;
  std::vector<int64_t> best_start_;
  const int64_t limit_;
  const Clock::time_point deadline_;
  int64_t nodes_ = 0;
  bool stopped_ = false;

  std::vector<int> topo_;                  // every instance, in a topological order
  std::vector<std::vector<int>> on_device_;
  std::vector<int64_t> start_;             // -1: not placed
  std::vector<int64_t> ready_at_;          // placed predecessors' ends plus lags
  std::vector<int> waiting_;               // predecessors not placed
  std::vector<int64_t> free_at_;           // per device: end of its last instance
  std::vector<int64_t> held_;              // per device: running memory
  std::vector<int64_t> est_;               // LowerBound's earliest starts
  // Values to restore on backtracking: (-1 - device, free_at) or (instance, ready_at).
  std::vector<std::pair<int, int64_t>> undo_;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> scratch_;
  std::vector<std::pair<int64_t, int64_t>> ready_;
};

}  // namespace

ExactScheduleResult BranchAndBoundSchedule(const BlockModel& model, const ModelFacts& facts,
                                           int microbatches, int64_t below, int64_t node_limit,
                                           std::chrono::steady_clock::time_point deadline) {
  return BranchAndBound(model, facts, microbatches, below, node_limit, deadline).Run();
}

}  // namespace loom::schedule
