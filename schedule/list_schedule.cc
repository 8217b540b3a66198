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

std::optional<Schedule> ListSchedule(const BlockModel& model, const ModelFacts& facts,
                                     int microbatches, ListPriority priority) {
  const int n = model.num_blocks();
  const int total = n * microbatches;
  std::vector<int> waiting(total);   // unfinished predecessors
  std::vector<int64_t> ready_at(total, 0);  // latest predecessor end + lag
  std::vector<int64_t> start(total, -1);
  std::vector<int> ready;            // instances whose predecessors are scheduled
  for (int m = 0; m < microbatches; ++m) {
    for (int b = 0; b < n; ++b) {
      waiting[m * n + b] = static_cast<int>(model.blocks[b].preds.size());
      if (waiting[m * n + b] == 0) ready.push_back(m * n + b);
    }
  }
  std::vector<int64_t> free_at(model.num_devices, 0);
  std::vector<int64_t> held(model.num_devices, 0);
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
  auto fits = [&](int id) {
    const Block& block = model.blocks[id % n];
    if (!model.has_cap()) return true;
    for (int d : block.devices) {
      if (held[d] + block.memory > model.memory_cap[d]) return false;
    }
    return true;
  };
  for (int placed = 0; placed < total; ++placed) {
    // The earliest start among the instances that fit, ties by the rule.
    int best = -1;
    int64_t best_start = kNever;
    for (int id : ready) {
      if (!fits(id)) continue;
      int64_t t = ready_at[id];
      for (int d : model.blocks[id % n].devices) t = std::max(t, free_at[d]);
      if (best < 0 || t < best_start || (t == best_start && key(id) < key(best))) {
        best = id;
        best_start = t;
      }
    }
    if (best < 0) return std::nullopt;  // every candidate exceeds a cap
    const Block& block = model.blocks[best % n];
    start[best] = best_start;
    for (int d : block.devices) {
      free_at[d] = best_start + block.span;
      held[d] += block.memory;
    }
    ready.erase(std::find(ready.begin(), ready.end(), best));
    const int m = best / n;
    for (int s : facts.succs[best % n]) {
      const int id = m * n + s;
      for (const Dep& p : model.blocks[s].preds) {
        if (p.block == best % n) {
          ready_at[id] = std::max(ready_at[id], best_start + block.span + p.lag);
        }
      }
      if (--waiting[id] == 0) ready.push_back(id);
    }
  }
  Schedule s = ScheduleFromTimes(model, microbatches, start);
  s.name = absl::StrCat("list/", ListPriorityName(priority));
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
  std::vector<int> waiting(total);
  std::vector<int64_t> ready_at(total, 0);
  std::vector<int64_t> start(total, -1);
  std::vector<int> ready;
  for (int id = 0; id < total; ++id) {
    waiting[id] = static_cast<int>(model.blocks[id % n].preds.size());
    if (waiting[id] == 0) ready.push_back(id);
  }
  std::vector<int64_t> free_at(model.num_devices, 0);
  std::vector<int64_t> held(model.num_devices, 0);
  for (int placed = 0; placed < total; ++placed) {
    int best = -1;
    for (int id : ready) {
      const Block& block = model.blocks[id % n];
      bool fits = true;
      if (model.has_cap()) {
        for (int d : block.devices) fits &= held[d] + block.memory <= model.memory_cap[d];
      }
      if (fits && (best < 0 || key[id] < key[best])) best = id;
    }
    if (best < 0) return std::nullopt;
    const Block& block = model.blocks[best % n];
    int64_t t = ready_at[best];
    for (int d : block.devices) t = std::max(t, free_at[d]);
    start[best] = t;
    for (int d : block.devices) {
      free_at[d] = t + block.span;
      held[d] += block.memory;
    }
    ready.erase(std::find(ready.begin(), ready.end(), best));
    const int m = best / n;
    for (int s : facts.succs[best % n]) {
      const int id = m * n + s;
      for (const Dep& p : model.blocks[s].preds) {
        if (p.block == best % n) ready_at[id] = std::max(ready_at[id], t + block.span + p.lag);
      }
      if (--waiting[id] == 0) ready.push_back(id);
    }
  }
  Schedule s = ScheduleFromTimes(model, microbatches, start);
  s.name = "list/random";
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
