// FactoredPlanOrder of schedule/factored_order.h.

#include "schedule/factored_order.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "schedule/plan_blocks.h"
#include "schedule/plan_steps.h"

namespace loom::schedule::internal {
namespace {

using ir::Plan;
using ir::PlanStep;

// The devices step `s` runs on: a task's device, a collective's members.
std::vector<int64_t> StepDevices(const StepGraph& g, int s) {
  if (!g.is_collective(s)) return {g.task(s).device};
  return g.collective(s).devices;
}

}  // namespace

absl::StatusOr<ir::FactoredOrder> FactoredPlanOrder(
    const Plan& plan, const StepGraph& g, const Assignment& a, const BlockModel& model,
    const Schedule& schedule, const SimResult& sim) {
  const ir::Factoring& f = *plan.factoring;
  const int64_t unit = f.dp > 1 ? f.dp_device_stride : plan.mesh.num_devices();
  const int num_blocks = model.num_blocks();
  const int microbatches = schedule.microbatches;

  // Each step where it runs: before the blocks, in a block's template on each of
  // its devices, as a transfer between ranks, or after the blocks; all in the
  // plan's data-flow order, so that every device lists the steps it shares with
  // others in one relative order.
  std::vector<int> before, after_tagged, after;
  std::vector<std::vector<std::vector<int>>> templates(
      num_blocks, std::vector<std::vector<int>>(unit));
  struct Transfer {
    int step;
    int after_block;   // emitted after this block's instance of its copy (-1: none)
    int before_block;  // else before this block's instance
  };
  std::vector<Transfer> transfers;
  for (int s : g.topo()) {
    const int b = a.step_block[s];
    if (b == kBeforeBlocks) {
      before.push_back(s);
    } else if (b == kAfterBlocks) {
      (g.microbatch(s) >= 0 ? after_tagged : after).push_back(s);
    } else if (b == kBetweenRanks) {
      Transfer t{s, -1, -1};
      for (ir::ValueId v : g.inputs(s)) {
        const int p = g.producer(v);
        if (p >= 0 && a.step_block[p] >= 0) t.after_block = a.step_block[p];
      }
      if (t.after_block < 0) {
        for (ir::ValueId v : g.outputs(s)) {
          for (int c : g.consumers(v)) {
            if (a.step_block[c] >= 0) t.before_block = a.step_block[c];
          }
        }
      }
      if (t.after_block < 0 && t.before_block < 0) {
        return Error("apply schedule: ", g.Describe(s),
                     " carries a value between pipeline ranks outside every block");
      }
      transfers.push_back(t);
    } else {
      const std::vector<int>& ranks = model.blocks[b].devices;
      for (int64_t d : StepDevices(g, s)) {
        if (d < 0 || d >= unit || std::find(ranks.begin(), ranks.end(), a.rank_of_device[d]) ==
                                      ranks.end()) {
          return Error("apply schedule: ", g.Describe(s), " of block ", model.blocks[b].name,
                       " reaches device ", d, " outside the block's pipeline rank");
        }
        templates[b][d].push_back(s);
      }
    }
  }
  std::vector<std::vector<int>> after_of(num_blocks), before_of(num_blocks);
  for (size_t k = 0; k < transfers.size(); ++k) {
    if (transfers[k].after_block >= 0) {
      after_of[transfers[k].after_block].push_back(static_cast<int>(k));
    } else {
      before_of[transfers[k].before_block].push_back(static_cast<int>(k));
    }
  }

  // Every device's program, one global sequence at a time: the work before the
  // blocks, the block instances in the order of their simulated starts (each with
  // the transfers it receives before it and sends after it), the work after. A
  // device's steps of one stretch (its work before the blocks, a block instance,
  // a transfer, ...) form one run; a block's runs share its segment.
  ir::FactoredOrder order;
  order.programs.resize(unit);
  auto segment_of = [&](std::vector<PlanStep> steps) {
    order.segments.push_back(std::move(steps));
    return static_cast<int32_t>(order.segments.size() - 1);
  };
  // Per device, the steps of `list` it takes part in, as one segment (-1: none).
  auto per_device = [&](const std::vector<int>& list) {
    std::vector<std::vector<PlanStep>> steps(unit);
    for (int s : list) {
      for (int64_t d : StepDevices(g, s)) steps[d].push_back(g.plan_step(s));
    }
    std::vector<int32_t> segment(unit, -1);
    for (int64_t d = 0; d < unit; ++d) {
      if (!steps[d].empty()) segment[d] = segment_of(std::move(steps[d]));
    }
    return segment;
  };
  auto run = [&](const std::vector<int32_t>& segment, int m) {
    for (int64_t d = 0; d < unit; ++d) {
      if (segment[d] >= 0) order.programs[d].push_back(ir::OrderRun{segment[d], m});
    }
  };
  std::vector<int32_t> transfer_segment(transfers.size());
  for (size_t k = 0; k < transfers.size(); ++k) {
    transfer_segment[k] = segment_of({g.plan_step(transfers[k].step)});
  }
  auto transfer = [&](int k, int m) {
    for (int64_t d : StepDevices(g, transfers[k].step)) {
      order.programs[d].push_back(ir::OrderRun{transfer_segment[k], m});
    }
  };
  run(per_device(before), -1);
  std::vector<std::vector<int32_t>> block_segment;
  for (int b = 0; b < num_blocks; ++b) {
    std::vector<int32_t> segment(unit, -1);
    for (int64_t d = 0; d < unit; ++d) {
      if (templates[b][d].empty()) continue;
      std::vector<PlanStep> steps;
      for (int s : templates[b][d]) steps.push_back(g.plan_step(s));
      segment[d] = segment_of(std::move(steps));
    }
    block_segment.push_back(std::move(segment));
  }
  std::vector<std::tuple<int64_t, int, int>> instances;  // start, block, micro-batch
  for (int m = 0; m < microbatches; ++m) {
    for (int b = 0; b < num_blocks; ++b) {
      instances.push_back({sim.start[static_cast<size_t>(m) * num_blocks + b], b, m});
    }
  }
  std::sort(instances.begin(), instances.end());
  for (const auto& [start, b, m] : instances) {
    for (int k : before_of[b]) transfer(k, m);
    run(block_segment[b], m);
    for (int k : after_of[b]) transfer(k, m);
  }
  const std::vector<int32_t> tagged_after = per_device(after_tagged);
  for (int m = 0; m < microbatches; ++m) run(tagged_after, m);
  run(per_device(after), -1);
  return order;
}

}  // namespace loom::schedule::internal
