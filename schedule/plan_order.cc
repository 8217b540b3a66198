// ApplySchedule and CheckPlanOrder of schedule/plan_blocks.h.

#include "schedule/plan_blocks.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "schedule/factored_order.h"
#include "schedule/plan_steps.h"

namespace loom::schedule {
namespace {

using internal::AssignBlocks;
using internal::Assignment;
using internal::Error;
using internal::PlanMicrobatches;
using internal::StepGraph;
using ir::Collective;
using ir::Plan;
using ir::PlanStep;
using ir::Task;
using ir::ValueId;

absl::Status CheckBlocksMatch(const Assignment& a, const BlockModel& model) {
  if (static_cast<int>(a.blocks.size()) != model.num_blocks() || a.num_ranks != model.num_devices) {
    return Error("apply schedule: the plan has ", a.blocks.size(), " blocks on ", a.num_ranks,
                 " pipeline ranks, the block model ", model.num_blocks(), " on ", model.num_devices,
                 " devices (blocks made from another plan?)");
  }
  for (int b = 0; b < model.num_blocks(); ++b) {
    const Block& want = a.blocks[b];
    const Block& have = model.blocks[b];
    if (want.name != have.name || want.devices != have.devices || want.kind != have.kind) {
      return Error("apply schedule: block ", b, " is '", have.name, "' on device ",
                   absl::StrJoin(have.devices, ","), " in the block model, '", want.name,
                   "' on pipeline rank ", absl::StrJoin(want.devices, ","),
                   " in the plan (blocks made from another plan?)");
    }
  }
  return absl::OkStatus();
}

// Per device: its tasks in program order, each with the time key of its segment.
struct DeviceProgram {
  std::vector<int> tasks;
  std::vector<int64_t> key;
};

absl::StatusOr<std::vector<DeviceProgram>> DevicePrograms(const Plan& plan, const StepGraph& g,
                                                          const Assignment& a,
                                                          const Schedule& schedule,
                                                          const SimResult& sim) {
  const int num_blocks = static_cast<int>(a.blocks.size());
  const int64_t per_rank = static_cast<int64_t>(num_blocks) * schedule.microbatches;
  std::vector<int> slot(per_rank * a.num_ranks, -1);  // [rank][instance] -> position
  for (int r = 0; r < a.num_ranks; ++r) {
    const std::vector<Instance>& order = schedule.order[r];
    for (size_t i = 0; i < order.size(); ++i) {
      slot[r * per_rank + order[i].microbatch * num_blocks + order[i].block] = static_cast<int>(i);
    }
  }
  constexpr int64_t kLast = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<std::tuple<int64_t, int, int>>> items(plan.mesh.num_devices());
  std::vector<DeviceProgram> programs(plan.mesh.num_devices());
  for (int t = 0; t < g.num_tasks(); ++t) {
    const int64_t d = g.task(t).device;
    const int b = a.step_block[t];
    const int m = g.microbatch(t);
    if (b == kBeforeBlocks || b == kAfterBlocks) {
      items[d].push_back({b == kBeforeBlocks ? -1 : kLast, g.position(t), t});
      continue;
    }
    const int instance = m * num_blocks + b;
    const int pos =
        m < schedule.microbatches ? slot[a.rank_of_device[d] * per_rank + instance] : -1;
    if (pos < 0) {
      return Error("apply schedule: ", g.Describe(t), " belongs to ", a.blocks[b].name, ".", m,
                   ", which the schedule does not run on pipeline rank ", a.rank_of_device[d]);
    }
    items[d].push_back({pos, g.position(t), t});
  }
  for (size_t d = 0; d < items.size(); ++d) {
    std::sort(items[d].begin(), items[d].end());
    for (const auto& [pos, unused, t] : items[d]) {
      programs[d].tasks.push_back(t);
      const int b = a.step_block[t];
      programs[d].key.push_back(
          b >= 0 ? sim.start[static_cast<size_t>(g.microbatch(t)) * num_blocks + b] : pos);
    }
  }
  return programs;
}

// Runs every device's program in one sequence, the device whose next task has the
// earliest segment start first; collectives run as soon as their inputs exist and
// are appended to every member's order at that point.
class Emitter {
 public:
  Emitter(const Plan& plan, const StepGraph& g, std::vector<DeviceProgram> programs)
      : plan_(plan), g_(g), programs_(std::move(programs)) {}
  absl::StatusOr<std::vector<std::vector<PlanStep>>> Run();

 private:
  using Key = std::tuple<int64_t, int, int64_t>;  // segment start, topological position, device
  void Ready(ValueId v);
  void PushHead(int64_t d);
  absl::Status Stuck() const;

  const Plan& plan_;
  const StepGraph& g_;
  std::vector<DeviceProgram> programs_;
  std::vector<size_t> next_;
  std::vector<int> missing_;
  std::vector<char> emitted_;
  std::vector<int> pending_collectives_;
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> heads_;
  std::vector<std::vector<PlanStep>> order_;
};

void Emitter::PushHead(int64_t d) {
  const DeviceProgram& p = programs_[d];
  if (next_[d] >= p.tasks.size() || missing_[p.tasks[next_[d]]] > 0) return;
  heads_.push({p.key[next_[d]], g_.position(p.tasks[next_[d]]), d});
}

void Emitter::Ready(ValueId v) {
  for (int c : g_.consumers(v)) {
    if (--missing_[c] > 0) continue;
    if (g_.is_collective(c)) {
      pending_collectives_.push_back(c);
    } else {
      const int64_t d = g_.task(c).device;
      if (next_[d] < programs_[d].tasks.size() && programs_[d].tasks[next_[d]] == c) PushHead(d);
    }
  }
}

absl::StatusOr<std::vector<std::vector<PlanStep>>> Emitter::Run() {
  const int64_t num_devices = static_cast<int64_t>(programs_.size());
  order_.assign(num_devices, {});
  next_.assign(num_devices, 0);
  emitted_.assign(g_.num_steps(), 0);
  missing_.assign(g_.num_steps(), 0);
  for (int s = 0; s < g_.num_steps(); ++s) {
    for (ValueId v : g_.inputs(s)) missing_[s] += g_.producer(v) >= 0;
    if (g_.is_collective(s) && missing_[s] == 0) pending_collectives_.push_back(s);
  }
  for (int64_t d = 0; d < num_devices; ++d) PushHead(d);
  while (true) {
    while (!pending_collectives_.empty()) {
      const int c = pending_collectives_.back();
      pending_collectives_.pop_back();
      emitted_[c] = 1;
      for (int64_t d : g_.collective(c).devices) order_[d].push_back(g_.plan_step(c));
      for (ValueId v : g_.outputs(c)) Ready(v);
    }
    if (heads_.empty()) break;
    const int64_t d = std::get<2>(heads_.top());
    heads_.pop();
    const int t = programs_[d].tasks[next_[d]];
    emitted_[t] = 1;
    order_[d].push_back(g_.plan_step(t));
    for (ValueId v : g_.outputs(t)) Ready(v);
    ++next_[d];
    PushHead(d);
  }
  for (int s = 0; s < g_.num_steps(); ++s) {
    if (!emitted_[s]) return Stuck();
  }
  return std::move(order_);
}

absl::Status Emitter::Stuck() const {
  std::vector<std::string> waits;
  for (size_t d = 0; d < programs_.size() && waits.size() < 4; ++d) {
    if (next_[d] >= programs_[d].tasks.size()) continue;
    const int t = programs_[d].tasks[next_[d]];
    std::string line = absl::StrCat("device ", d, " waits at ", g_.Describe(t));
    for (ValueId v : g_.inputs(t)) {
      const int p = g_.producer(v);
      if (p >= 0 && !emitted_[p]) {
        absl::StrAppend(&line, " for value ", v, " of ", g_.Describe(p));
        break;
      }
    }
    waits.push_back(std::move(line));
  }
  return Error("apply schedule: the schedule contradicts the plan's data flow: ",
               absl::StrJoin(waits, "; "));
}

}  // namespace

absl::StatusOr<ir::Plan> ApplySchedule(const ir::Plan& plan, const PlanBlocks& blocks,
                                       const Schedule& schedule, int64_t max_expanded_steps) {
  Plan out = plan;
  out.order.clear();
  out.factored_order = {};
  LOOM_ASSIGN_OR_RETURN(StepGraph g, StepGraph::Build(out));
  LOOM_ASSIGN_OR_RETURN(Assignment a, AssignBlocks(out, g));
  LOOM_RETURN_IF_ERROR(CheckBlocksMatch(a, blocks.model));
  const int microbatches = PlanMicrobatches(out, g);
  if (schedule.microbatches != microbatches) {
    return Error("apply schedule: the schedule has ", schedule.microbatches,
                 " micro-batches, the plan ", microbatches);
  }
  absl::StatusOr<SimResult> sim = Simulate(blocks.model, schedule);
  if (!sim.ok()) {
    return Error("apply schedule: schedule: ", sim.status().message());
  }
  if (!sim->valid) return Error("apply schedule: the schedule is invalid: ", sim->violation);
  if (out.is_factored()) {
    // Steps of the scale unit's programs over every micro-batch.
    int64_t steps = 0;
    for (int s = 0; s < g.num_steps(); ++s) {
      const int64_t copies = g.microbatch(s) >= 0 ? microbatches : 1;
      steps += copies * (g.is_collective(s) ? static_cast<int64_t>(g.collective(s).devices.size())
                                            : 1);
    }
    if (steps > max_expanded_steps) {
      return Error("apply schedule: the plan's scale unit runs ", steps,
                   " steps over its micro-batches, more than the ", max_expanded_steps,
                   " this step orders");
    }
    LOOM_ASSIGN_OR_RETURN(out.factored_order,
                          internal::FactoredPlanOrder(out, g, a, blocks.model, schedule, *sim));
    return out;
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<DeviceProgram> programs,
                        DevicePrograms(out, g, a, schedule, *sim));
  Emitter emitter(out, g, std::move(programs));
  LOOM_ASSIGN_OR_RETURN(out.order, emitter.Run());
  return out;
}

// ---------------------------------------------------------------------------
// ScheduleFromPlanOrder.

absl::StatusOr<Schedule> ScheduleFromPlanOrder(const ir::Plan& plan, const PlanBlocks& blocks) {
  const bool any = plan.is_factored()
                       ? !plan.factored_order.empty()
                       : std::any_of(plan.order.begin(), plan.order.end(),
                                     [](const std::vector<PlanStep>& p) { return !p.empty(); });
  if (!any) return Error("plan order: the plan has no per-device order (loom search --plan -o)");
  const int num_blocks = blocks.model.num_blocks();
  const int microbatches = blocks.microbatches;
  const int pp_axis = plan.mesh.AxisIndex("pp");
  Schedule schedule;
  schedule.microbatches = microbatches;
  schedule.name = "plan order";
  schedule.order.assign(blocks.model.num_devices, {});
  std::vector<int64_t> first_device(blocks.model.num_devices, -1);
  const size_t programs =
      plan.is_factored() ? plan.factored_order.programs.size() : plan.order.size();
  for (size_t d = 0; d < programs; ++d) {
    const int rank =
        pp_axis < 0 ? 0 : static_cast<int>(plan.mesh.Coordinates(static_cast<int64_t>(d))[pp_axis]);
    if (rank < 0 || rank >= blocks.model.num_devices) {
      return Error("plan order: device ", d, " is on pipeline rank ", rank, ", the blocks have ",
                   blocks.model.num_devices);
    }
    std::vector<Instance> seen;
    std::vector<char> listed(static_cast<size_t>(num_blocks) * microbatches, 0);
    const std::vector<PlanStep> program =
        plan.is_factored() ? plan.factored_order.Program(d) : plan.order[d];
    for (const PlanStep& step : program) {
      if (step.is_collective || step.id < 0 ||
          step.id >= static_cast<int>(blocks.task_block.size())) {
        continue;
      }
      const int b = blocks.task_block[step.id];
      if (b < 0) continue;
      const int m = plan.is_factored() ? step.microbatch : plan.tasks[step.id].info.microbatch;
      if (m < 0 || m >= microbatches) continue;
      char& mark = listed[static_cast<size_t>(m) * num_blocks + b];
      if (mark) continue;
      mark = 1;
      seen.push_back(Instance{b, m});
    }
    if (seen.empty()) continue;
    if (first_device[rank] < 0) {
      first_device[rank] = static_cast<int64_t>(d);
      schedule.order[rank] = std::move(seen);
    } else if (seen != schedule.order[rank]) {
      return Error("plan order: devices ", first_device[rank], " and ", d, " of pipeline rank ",
                   rank, " run its blocks in different orders");
    }
  }
  for (int r = 0; r < blocks.model.num_devices; ++r) {
    size_t want = 0;
    for (int b = 0; b < num_blocks; ++b) {
      const std::vector<int>& on = blocks.model.blocks[b].devices;
      want += std::count(on.begin(), on.end(), r) * static_cast<size_t>(microbatches);
    }
    if (schedule.order[r].size() != want) {
      return Error("plan order: pipeline rank ", r, " runs ", schedule.order[r].size(),
                   " block instances, its blocks have ", want);
    }
  }
  return schedule;
}

// ---------------------------------------------------------------------------
// CheckPlanOrder.

absl::Status CheckPlanOrder(const ir::Plan& plan) {
  const int64_t num_devices = plan.mesh.num_devices();
  if (static_cast<int64_t>(plan.order.size()) != num_devices) {
    return Error("plan order: ", plan.order.size(), " device lists for ", num_devices, " devices");
  }
  LOOM_ASSIGN_OR_RETURN(StepGraph g, StepGraph::Build(plan));
  std::vector<int> seen(g.num_steps(), 0);
  for (int64_t d = 0; d < num_devices; ++d) {
    for (const PlanStep& p : plan.order[d]) {
      const int limit = p.is_collective ? static_cast<int>(plan.collectives.size()) : g.num_tasks();
      if (p.id < 0 || p.id >= limit) return Error("plan order: device ", d, ": unknown step");
      const int s = p.is_collective ? g.num_tasks() + p.id : p.id;
      const std::vector<int64_t>& members =
          p.is_collective ? plan.collectives[p.id].devices : std::vector<int64_t>{};
      if (p.is_collective ? std::count(members.begin(), members.end(), d) != 1
                          : plan.tasks[p.id].device != d) {
        return Error("plan order: device ", d, " lists ", g.Describe(s), ", not its own");
      }
      ++seen[s];
    }
  }
  for (int s = 0; s < g.num_steps(); ++s) {
    const size_t want = g.is_collective(s) ? g.collective(s).devices.size() : 1;
    if (static_cast<size_t>(seen[s]) != want) {
      return Error("plan order: ", g.Describe(s), " is listed ", seen[s], " times, expected ",
                   want);
    }
  }
  std::vector<char> ready(plan.values.size(), 0);
  for (size_t v = 0; v < plan.values.size(); ++v) ready[v] = g.producer(v) < 0;
  std::vector<size_t> pc(num_devices, 0);
  auto at = [&](int64_t d) { return plan.order[d][pc[d]]; };
  auto inputs_ready = [&](const std::vector<ValueId>& in) {
    return std::all_of(in.begin(), in.end(), [&](ValueId v) { return ready[v] != 0; });
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t d = 0; d < num_devices; ++d) {
      while (pc[d] < plan.order[d].size()) {
        const PlanStep p = at(d);
        const int s = p.is_collective ? g.num_tasks() + p.id : p.id;
        if (!inputs_ready(g.inputs(s))) break;
        if (p.is_collective) {
          const std::vector<int64_t>& members = g.collective(s).devices;
          if (!std::all_of(members.begin(), members.end(),
                           [&](int64_t m) { return pc[m] < plan.order[m].size() && at(m) == p; })) {
            break;
          }
          for (int64_t m : members) ++pc[m];
        } else {
          ++pc[d];
        }
        for (ValueId v : g.outputs(s)) ready[v] = 1;
        progress = true;
      }
    }
  }
  std::vector<std::string> blocked;
  for (int64_t d = 0; d < num_devices && blocked.size() < 4; ++d) {
    if (pc[d] >= plan.order[d].size()) continue;
    const PlanStep p = at(d);
    const int s = p.is_collective ? g.num_tasks() + p.id : p.id;
    blocked.push_back(
        absl::StrCat("device ", d, " waits at ", g.Describe(s),
                     inputs_ready(g.inputs(s)) ? " for its other members" : " for an input"));
  }
  if (blocked.empty()) return absl::OkStatus();
  return Error("plan order: the programs deadlock: ", absl::StrJoin(blocked, "; "));
}

}  // namespace loom::schedule
