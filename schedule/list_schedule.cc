#include "schedule/list_schedule.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace loom::schedule {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

}  // namespace

std::vector<ListPriority> ListPriorities() {
  return {ListPriority::kMicrobatchFirst, ListPriority::kFreeMemoryFirst,
          ListPriority::kCriticalPathFirst};
}

std::string ListPriorityName(ListPriority priority) {
  switch (priority) {
    case ListPriority::kMicrobatchFirst:
      return "microbatch_first";
    case ListPriority::kFreeMemoryFirst:
      return "free_memory_first";
    case ListPriority::kCriticalPathFirst:
      return "critical_path_first";
  }
  return "?";
}

namespace {

// Block instances (id = micro-batch * blocks + block) placed one at a time, each at
// the earliest time its dependencies (with their lags) and its devices allow. The
// rules differ only in which ready instance goes next.
class InstancePlacer {
 public:
  InstancePlacer(const BlockModel& model, const ModelFacts& facts, int microbatches)
      : model_(model),
        facts_(facts),
        n_(model.num_blocks()),
        total_(n_ * microbatches),
        microbatches_(microbatches),
        waiting_(total_),
        ready_at_(total_, 0),
        start_(total_, -1),
        free_at_(model.num_devices, 0),
        held_(model.num_devices, 0) {
    for (int id = 0; id < total_; ++id) {
      waiting_[id] = static_cast<int>(model.blocks[id % n_].preds.size());
      if (waiting_[id] == 0) ready_.push_back(id);
    }
  }

  // The earliest time instance `id` can start.
  int64_t Earliest(int id) const {
    int64_t t = ready_at_[id];
    for (int d : model_.blocks[id % n_].devices) t = std::max(t, free_at_[d]);
    return t;
  }
  // Whether starting it keeps every one of its devices within its cap.
  bool Fits(int id) const {
    const Block& block = model_.blocks[id % n_];
    if (!model_.has_cap()) return true;
    for (int d : block.devices) {
      if (held_[d] + block.memory > model_.memory_cap[d]) return false;
    }
    return true;
  }

  // Places every instance, `pick(ready)` choosing the next among the ready ones (-1:
  // none fits). The schedule of the start times, or nullopt on a dead end.
  template <typename Pick>
  std::optional<Schedule> Run(Pick pick) {
    for (int placed = 0; placed < total_; ++placed) {
      const int best = pick(static_cast<const std::vector<int>&>(ready_));
      if (best < 0) return std::nullopt;  // every candidate exceeds a cap
      Place(best);
    }
    return ScheduleFromTimes(model_, microbatches_, start_);
  }

 private:
  void Place(int id) {
    const Block& block = model_.blocks[id % n_];
    const int64_t t = Earliest(id);
    start_[id] = t;
    for (int d : block.devices) {
      free_at_[d] = t + block.span;
      held_[d] += block.memory;
    }
    ready_.erase(std::find(ready_.begin(), ready_.end(), id));
    const int m = id / n_;
    for (int s : facts_.succs[id % n_]) {
      const int next = m * n_ + s;
      for (const Dep& p : model_.blocks[s].preds) {
        if (p.block == id % n_) ready_at_[next] = std::max(ready_at_[next], t + block.span + p.lag);
      }
      if (--waiting_[next] == 0) ready_.push_back(next);
    }
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  const int n_;
  const int total_;
  const int microbatches_;
  std::vector<int> waiting_;         // unfinished predecessors
  std::vector<int64_t> ready_at_;    // latest predecessor end + lag
  std::vector<int64_t> start_;
  std::vector<int64_t> free_at_;     // per device
  std::vector<int64_t> held_;        // per device
  std::vector<int> ready_;           // instances whose predecessors are placed
};

}  // namespace

std::optional<Schedule> ListSchedule(const BlockModel& model, const ModelFacts& facts,
                                     int microbatches, ListPriority priority) {
  const int n = model.num_blocks();
  // The rule's key of an instance: smaller goes first.
  auto key = [&](int id) {
    const int b = id % n;
    const int m = id / n;
    const Block& block = model.blocks[b];
    const int64_t tail = facts.tail[b] + block.span;
    switch (priority) {
      case ListPriority::kMicrobatchFirst:
        return std::make_tuple(int64_t{m}, -tail, int64_t{b});
      case ListPriority::kFreeMemoryFirst:
        return std::make_tuple(int64_t{block.memory >= 0}, int64_t{m}, -tail);
      case ListPriority::kCriticalPathFirst:
        return std::make_tuple(-tail, int64_t{m}, int64_t{b});
    }
    return std::make_tuple(int64_t{m}, int64_t{b}, int64_t{0});
  };
  InstancePlacer placer(model, facts, microbatches);
  // The earliest start among the instances that fit, ties by the rule.
  std::optional<Schedule> s = placer.Run([&](const std::vector<int>& ready) {
    int best = -1;
    int64_t best_start = kNever;
    for (int id : ready) {
      if (!placer.Fits(id)) continue;
      const int64_t t = placer.Earliest(id);
      if (best < 0 || t < best_start || (t == best_start && key(id) < key(best))) {
        best = id;
        best_start = t;
      }
    }
    return best;
  });
  if (s.has_value()) s->name = absl::StrCat("list/", ListPriorityName(priority));
  return s;
}

std::optional<Schedule> RandomListSchedule(const BlockModel& model, const ModelFacts& facts,
                                           int microbatches, uint64_t seed, double spread) {
  const int n = model.num_blocks();
  const int total = n * microbatches;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> noise(0.0, spread);
  std::vector<double> key(total);
  for (int id = 0; id < total; ++id) key[id] = static_cast<double>(id / n) + noise(rng);
  InstancePlacer placer(model, facts, microbatches);
  // The least key among the instances that fit, whenever it can start.
  std::optional<Schedule> s = placer.Run([&](const std::vector<int>& ready) {
    int best = -1;
    for (int id : ready) {
      if (placer.Fits(id) && (best < 0 || key[id] < key[best])) best = id;
    }
    return best;
  });
  if (s.has_value()) s->name = "list/random";
  return s;
}

namespace {

// Depth-first search for a topological order of one micro-batch within the caps,
// blocks that free the most memory tried first.
class CappedOrder {
 public:
  CappedOrder(const BlockModel& model, const ModelFacts& facts, int64_t node_limit)
      : model_(model), facts_(facts), nodes_left_(node_limit) {}

  std::optional<std::vector<int>> Find() {
    const int n = model_.num_blocks();
    waiting_.assign(n, 0);
    for (int b = 0; b < n; ++b) waiting_[b] = static_cast<int>(model_.blocks[b].preds.size());
    held_.assign(model_.num_devices, 0);
    order_.clear();
    if (Dfs()) return order_;
    return std::nullopt;
  }

 private:
  bool Fits(int b) const {
    if (!model_.has_cap()) return true;
    for (int d : model_.blocks[b].devices) {
      if (held_[d] + model_.blocks[b].memory > model_.memory_cap[d]) return false;
    }
    return true;
  }

  bool Dfs() {
    const int n = model_.num_blocks();
    if (static_cast<int>(order_.size()) == n) return true;
    if (--nodes_left_ < 0) return false;
    std::vector<int> ready;
    for (int b = 0; b < n; ++b) {
      if (waiting_[b] == 0 && Fits(b)) ready.push_back(b);
    }
    std::stable_sort(ready.begin(), ready.end(), [&](int a, int b) {
      return model_.blocks[a].memory < model_.blocks[b].memory;
    });
    for (int b : ready) {
      waiting_[b] = -1;  // placed
      for (int d : model_.blocks[b].devices) held_[d] += model_.blocks[b].memory;
      for (int s : facts_.succs[b]) --waiting_[s];
      order_.push_back(b);
      if (Dfs()) return true;
      order_.pop_back();
      for (int s : facts_.succs[b]) ++waiting_[s];
      for (int d : model_.blocks[b].devices) held_[d] -= model_.blocks[b].memory;
      waiting_[b] = 0;
      if (nodes_left_ < 0) return false;
    }
    return false;
  }

  const BlockModel& model_;
  const ModelFacts& facts_;
  int64_t nodes_left_;
  std::vector<int> waiting_;
  std::vector<int64_t> held_;
  std::vector<int> order_;
};

}  // namespace

std::optional<Schedule> SerialSchedule(const BlockModel& model, const ModelFacts& facts,
                                       int microbatches, int64_t node_limit) {
  std::optional<std::vector<int>> order = CappedOrder(model, facts, node_limit).Find();
  if (!order.has_value()) return std::nullopt;
  Schedule s;
  s.name = "serial";
  s.microbatches = microbatches;
  s.order.assign(model.num_devices, {});
  for (int m = 0; m < microbatches; ++m) {
    for (int b : *order) {
      for (int d : model.blocks[b].devices) s.order[d].push_back(Instance{b, m});
    }
  }
  return s;
}

}  // namespace loom::schedule
