#include "schedule/order_search.h"

#include <random>
#include <utility>
#include <vector>

namespace loom::schedule {

std::optional<Schedule> ImproveOrders(const BlockModel& model, const Schedule& start,
                                      int64_t moves, uint64_t seed,
                                      std::chrono::steady_clock::time_point deadline) {
  Schedule s = start;
  s.start.clear();  // timed as soon as possible with the orders
  s.repetend.reset();
  absl::StatusOr<SimResult> first = Simulate(model, s);
  if (!first.ok() || !first->valid) return std::nullopt;
  const int64_t initial = first->makespan;
  int64_t current = initial;
  std::vector<std::vector<Instance>> best_order = s.order;
  std::mt19937_64 rng(seed);
  for (int64_t k = 0; k < moves; ++k) {
    if ((k & 63) == 0 && std::chrono::steady_clock::now() > deadline) break;
    std::vector<Instance>& order = s.order[rng() % s.order.size()];
    if (order.size() < 2) continue;
    const size_t from = rng() % order.size();
    const size_t to = rng() % order.size();
    if (from == to) continue;
    const Instance moved = order[from];
    order.erase(order.begin() + from);
    order.insert(order.begin() + to, moved);
    absl::StatusOr<SimResult> sim = Simulate(model, s);
    if (sim.ok() && sim->valid && sim->makespan <= current) {
      if (sim->makespan < current) best_order = s.order;
      current = sim->makespan;
    } else {
      order.erase(order.begin() + to);
      order.insert(order.begin() + from, moved);
    }
  }
  if (current >= initial) return std::nullopt;
  s.order = std::move(best_order);
  s.name = "local";
  return s;
}

}  // namespace loom::schedule
