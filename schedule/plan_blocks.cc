// BlocksFromPlan of schedule/plan_blocks.h: the costs, memory and dependencies of the
// blocks AssignBlocks finds.

#include "schedule/plan_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "schedule/plan_steps.h"

namespace loom::schedule {
namespace {

using internal::AssignBlocks;
using internal::Assignment;
using internal::Error;
using internal::PlanMicrobatches;
using internal::StepGraph;
using ir::Collective;
using ir::CollectiveKind;
using ir::Plan;
using ir::Task;
using ir::ValueId;

double ValueBytes(const Plan& plan, ValueId v) {
  const ir::PlanValue& value = plan.values[v];
  return static_cast<double>(ir::ValueShape(value).num_elements() * ir::DTypeBytes(value.dtype));
}

// Bytes collective `c` moves on its member `i` (ring volumes).
double CollectiveBytes(const Plan& plan, const Collective& c, size_t i) {
  int64_t group = static_cast<int64_t>(c.devices.size());
  if (c.spans_dp && plan.is_factored()) group *= plan.factoring->dp;
  const double share = group > 1 ? static_cast<double>(group - 1) / group : 0.0;
  auto in = [&] { return i < c.inputs.size() ? ValueBytes(plan, c.inputs[i]) : 0.0; };
  auto out = [&] { return i < c.outputs.size() ? ValueBytes(plan, c.outputs[i]) : 0.0; };
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      return 2 * share * in();
    case CollectiveKind::kAllGather:
      return share * out();
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return share * in();
    case CollectiveKind::kBroadcast:
      return out();
    case CollectiveKind::kSendRecv:
      return c.inputs.empty() ? 0.0 : ValueBytes(plan, c.inputs[0]);
  }
  return 0.0;
}

double TaskFlops(const Plan& plan, const Task& t) {
  std::vector<ir::TensorType> in, out;
  for (ValueId v : t.inputs) in.push_back({ir::ValueShape(plan.values[v]), plan.values[v].dtype});
  for (ValueId v : t.outputs) out.push_back({ir::ValueShape(plan.values[v]), plan.values[v].dtype});
  return ir::GetOpSchema(t.kind).flops(in, out, t.attrs);
}

// Per block and device, from micro-batch 0.
using DeviceCosts = std::vector<std::map<int64_t, BlockCost>>;

void AddStepCosts(const Plan& plan, const StepGraph& g, const Assignment& a, const CostModel& cost,
                  DeviceCosts& costs) {
  for (int s = 0; s < g.num_steps(); ++s) {
    const int b = a.step_block[s];
    if (b < 0 || g.microbatch(s) != 0) continue;
    if (!g.is_collective(s)) {
      BlockCost& bc = costs[b][g.task(s).device];
      const double flops = TaskFlops(plan, g.task(s));
      bc.flops += flops;
      bc.seconds += flops / cost.flops_per_second;
      continue;
    }
    const Collective& c = g.collective(s);
    for (size_t i = 0; i < c.devices.size(); ++i) {
      BlockCost& bc = costs[b][c.devices[i]];
      const double bytes = CollectiveBytes(plan, c, i);
      bc.comm_bytes += bytes;
      ++bc.collectives;
      bc.seconds += bytes / cost.bytes_per_second + cost.latency_seconds;
    }
  }
}

// Bytes of the values a forward block holds on a device (produced there, or
// received there for it) that the backward block of its stage reads.
void AddSavedBytes(const Plan& plan, const StepGraph& g, const Assignment& a, DeviceCosts& costs) {
  for (ValueId v = 0; v < static_cast<ValueId>(plan.values.size()); ++v) {
    const int p = g.producer(v);
    if (p < 0 || g.microbatch(p) != 0) continue;
    int holder = a.step_block[p];
    if (holder == kBetweenRanks) {
      // Received from a forward block: held from the forward block that reads it,
      // or, when only a backward block reads it (a recomputed layer's input, sent
      // again), from the forward block of that backward's stage, while which it
      // arrives.
      const int sender = g.producer(g.inputs(p)[0]);
      holder = -1;
      if (sender < 0 || a.step_block[sender] < 0 ||
          a.blocks[a.step_block[sender]].kind != BlockKind::kForward) {
        continue;
      }
      for (int c : g.consumers(v)) {
        const int cb = a.step_block[c];
        if (cb < 0) continue;
        const Block& b = a.blocks[cb];
        const int f = b.kind == BlockKind::kForward ? cb : a.forward_of_stage[b.stage];
        if (f >= 0 && (holder < 0 || b.kind == BlockKind::kForward)) holder = f;
      }
    }
    if (holder < 0 || a.blocks[holder].kind != BlockKind::kForward) continue;
    bool read_by_backward = false;
    for (int c : g.consumers(v)) {
      const int cb = a.step_block[c];
      read_by_backward |= cb >= 0 && a.blocks[cb].kind == BlockKind::kBackward &&
                          a.blocks[cb].stage == a.blocks[holder].stage;
    }
    if (read_by_backward) {
      costs[holder][plan.values[v].device].saved_bytes += static_cast<int64_t>(ValueBytes(plan, v));
    }
  }
}

// Dependencies between blocks from the data flow of micro-batch 0, with the
// seconds of the transfers on the way: (from, to) -> lag.
std::map<std::pair<int, int>, double> BlockDeps(const Plan& plan, const StepGraph& g,
                                                const Assignment& a, const CostModel& cost) {
  std::map<std::pair<int, int>, double> deps;
  // Per value: the blocks it comes from and the transfer time since.
  std::vector<std::vector<std::pair<int, double>>> from(plan.values.size());
  for (int s : g.topo()) {
    if (g.microbatch(s) != 0) continue;
    const int b = a.step_block[s];
    std::vector<std::pair<int, double>> out;
    if (b == kBetweenRanks) {
      const double t =
          CollectiveBytes(plan, g.collective(s), 0) / cost.bytes_per_second + cost.latency_seconds;
      for (ValueId v : g.inputs(s)) {
        for (auto [source, lag] : from[v]) {
          const int src = source;  // a lambda captures a variable, not a binding
          auto it = std::find_if(out.begin(), out.end(), [&](auto& e) { return e.first == src; });
          if (it == out.end()) {
            out.push_back({src, lag + t});
          } else {
            it->second = std::max(it->second, lag + t);
          }
        }
      }
    } else if (b >= 0) {
      for (ValueId v : g.inputs(s)) {
        for (auto [src, lag] : from[v]) {
          if (src == b) continue;
          auto [it, added] = deps.emplace(std::make_pair(src, b), lag);
          if (!added) it->second = std::max(it->second, lag);
        }
      }
      out.push_back({b, 0.0});
    }
    for (ValueId v : g.outputs(s)) from[v] = out;
  }
  // B<s> frees what F<s> keeps, so it follows F<s> even where no value of F<s>
  // reaches it (a recomputed stage whose input is sent again).
  for (size_t b = 0; b < a.blocks.size(); ++b) {
    const Block& block = a.blocks[b];
    if (block.kind != BlockKind::kBackward || a.forward_of_stage[block.stage] < 0) continue;
    deps.emplace(std::make_pair(a.forward_of_stage[block.stage], static_cast<int>(b)), 0.0);
  }
  return deps;
}

absl::Status CheckCostModel(const CostModel& c) {
  if (!(c.flops_per_second > 0) || !(c.bytes_per_second > 0) || !(c.latency_seconds >= 0) ||
      !(c.seconds_per_unit >= 0) || c.bytes_per_memory_unit < 1) {
    return Error(
        "cost model: flops_per_second, bytes_per_second and bytes_per_memory_unit must be "
        "positive, latency_seconds and seconds_per_unit not negative");
  }
  return absl::OkStatus();
}

// Drops each dependency between blocks of different ranks that a chain of others
// already enforces: a -> b with lag l when some path a -> c ... -> b keeps b at
// least l after a's end (the lags on the path plus the spans of the blocks inside
// it); B<s> reading the activation F<s-1> sent, which F<s> received first, is one.
// Dependencies on the same rank stay: they say what a block reads (B<s> the
// activations F<s> saved). The preds end up sorted by block.
void DropImpliedDeps(BlockModel& model) {
  const int n = model.num_blocks();
  std::vector<std::vector<std::pair<int, int64_t>>> succs(n);  // (block, lag)
  for (int b = 0; b < n; ++b) {
    for (const Dep& p : model.blocks[b].preds) succs[p.block].push_back({b, p.lag});
  }
  // Longest gap from the end of `from` to the start of every block, without the
  // direct edge from -> skip. Blocks are few; the plan's data flow is acyclic.
  auto longest_gap = [&](int from, int skip) {
    std::vector<int64_t> gap(n, -1);
    std::vector<int> stack;
    for (auto [b, lag] : succs[from]) {
      if (b == skip || gap[b] >= lag) continue;
      gap[b] = lag;
      stack.push_back(b);
    }
    while (!stack.empty()) {
      const int c = stack.back();
      stack.pop_back();
      for (auto [b, lag] : succs[c]) {
        const int64_t g = gap[c] + model.blocks[c].span + lag;
        if (g <= gap[b]) continue;
        gap[b] = g;
        stack.push_back(b);
      }
    }
    return gap;
  };
  for (int b = 0; b < n; ++b) {
    std::vector<Dep> kept;
    for (const Dep& p : model.blocks[b].preds) {
      if (model.blocks[p.block].devices == model.blocks[b].devices ||
          longest_gap(p.block, b)[b] < p.lag) {
        kept.push_back(p);
      }
    }
    std::sort(kept.begin(), kept.end(),
              [](const Dep& x, const Dep& y) { return x.block < y.block; });
    model.blocks[b].preds = std::move(kept);
  }
}

// Spans, memory and dependencies of the blocks in model units.
void FillModel(const DeviceCosts& costs, const std::map<std::pair<int, int>, double>& deps,
               const CostModel& cost, PlanBlocks& out) {
  double longest = 0;
  for (size_t b = 0; b < costs.size(); ++b) {
    BlockCost& best = out.costs[b];
    for (const auto& [device, bc] : costs[b]) {
      const int64_t saved = std::max(best.saved_bytes, bc.saved_bytes);
      if (bc.seconds > best.seconds) best = bc;
      best.saved_bytes = saved;
    }
    longest = std::max(longest, best.seconds);
  }
  double unit = cost.seconds_per_unit;
  if (unit <= 0) {
    // A hundredth of the longest block, coarser where a transfer is so much longer
    // (a tiny model's compute beside a link's latency) that its lag would pass the
    // block model's bound on spans and lags.
    double slowest_lag = 0;
    for (const auto& [edge, lag] : deps) slowest_lag = std::max(slowest_lag, lag);
    unit = longest > 0 ? longest / 100 : 1.0;
    const double bound = static_cast<double>(kMaxSpan);
    unit = std::max({unit, longest / bound, slowest_lag / bound});
  }
  out.seconds_per_unit = unit;
  out.bytes_per_memory_unit = cost.bytes_per_memory_unit;
  std::vector<Block>& blocks = out.model.blocks;
  for (size_t b = 0; b < blocks.size(); ++b) {
    blocks[b].span = std::max<int64_t>(1, std::llround(out.costs[b].seconds / unit));
    if (blocks[b].kind != BlockKind::kForward) continue;
    const int64_t units =
        (out.costs[b].saved_bytes + cost.bytes_per_memory_unit - 1) / cost.bytes_per_memory_unit;
    blocks[b].memory = units;
    const int backward = out.model.Find(absl::StrCat("B", blocks[b].stage));
    if (backward >= 0) blocks[backward].memory = -units;
  }
  for (const auto& [edge, lag] : deps) {
    blocks[edge.second].preds.push_back(
        Dep{edge.first, std::max<int64_t>(0, std::llround(lag / unit))});
  }
}

}  // namespace

absl::StatusOr<PlanBlocks> BlocksFromPlan(const ir::Graph& spec, const ir::Plan& plan,
                                          const CostModel& cost) {
  LOOM_RETURN_IF_ERROR(CheckCostModel(cost));
  LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
  LOOM_ASSIGN_OR_RETURN(StepGraph g, StepGraph::Build(plan));
  LOOM_ASSIGN_OR_RETURN(Assignment a, AssignBlocks(plan, g));
  PlanBlocks out;
  out.microbatches = PlanMicrobatches(plan, g);
  out.model.name = plan.model.empty() ? "plan" : plan.model;
  out.model.num_devices = a.num_ranks;
  out.model.blocks = a.blocks;
  out.costs.assign(a.blocks.size(), BlockCost{});
  DeviceCosts costs(a.blocks.size());
  AddStepCosts(plan, g, a, cost, costs);
  AddSavedBytes(plan, g, a, costs);
  FillModel(costs, BlockDeps(plan, g, a, cost), cost, out);
  out.task_block.assign(a.step_block.begin(), a.step_block.begin() + g.num_tasks());
  out.collective_block.assign(a.step_block.begin() + g.num_tasks(), a.step_block.end());
  absl::Status valid = ValidateBlockModel(out.model);
  if (!valid.ok()) {
    return absl::InternalError(
        absl::StrCat("plan blocks: the derived block model is invalid: ", valid.message()));
  }
  DropImpliedDeps(out.model);
  return out;
}

}  // namespace loom::schedule
