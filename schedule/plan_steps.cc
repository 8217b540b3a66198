#include "schedule/plan_steps.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "schedule/plan_blocks.h"

namespace loom::schedule::internal {

using ir::Collective;
using ir::CollectiveKind;
using ir::Plan;
using ir::Task;
using ir::ValueId;

std::string StepGraph::Describe(int s) const {
  if (is_collective(s)) {
    const Collective& c = collective(s);
    return absl::StrCat("collective ", c.id, " ", ir::CollectiveKindName(c.kind), " (devices ",
                        absl::StrJoin(c.devices, ","), ", micro-batch ", c.microbatch, ")");
  }
  const Task& t = task(s);
  return absl::StrCat("task ", t.id, " '", ir::OpKindName(t.kind), "' (device ", t.device,
                      ", micro-batch ", t.info.microbatch, ")");
}

absl::StatusOr<StepGraph> StepGraph::Build(const Plan& plan) {
  StepGraph g;
  g.plan_ = &plan;
  g.num_tasks_ = static_cast<int>(plan.tasks.size());
  const int n = g.num_tasks_ + static_cast<int>(plan.collectives.size());
  const int num_values = static_cast<int>(plan.values.size());
  g.position_.assign(n, -1);
  g.producer_.assign(num_values, -1);
  std::vector<int> count(num_values + 1, 0);
  for (int s = 0; s < n; ++s) {
    for (ValueId v : g.inputs(s)) {
      if (v < 0 || v >= num_values) return Error("plan: ", g.Describe(s), ": unknown value ", v);
      ++count[v];
    }
    for (ValueId v : g.outputs(s)) {
      if (v < 0 || v >= num_values) return Error("plan: ", g.Describe(s), ": unknown value ", v);
      if (g.producer_[v] >= 0)
        return Error("plan: ", g.Describe(s), ": value ", v, " is also written by ",
                     g.Describe(g.producer_[v]));
      g.producer_[v] = s;
    }
  }
  g.consumer_begin_.assign(num_values + 1, 0);
  for (int v = 0; v < num_values; ++v) g.consumer_begin_[v + 1] = g.consumer_begin_[v] + count[v];
  g.consumers_.resize(g.consumer_begin_[num_values]);
  std::vector<int> fill(g.consumer_begin_.begin(), g.consumer_begin_.end() - 1);
  for (int s = 0; s < n; ++s) {
    for (ValueId v : g.inputs(s)) g.consumers_[fill[v]++] = s;
  }
  LOOM_RETURN_IF_ERROR(g.TopologicalOrder());
  return g;
}

// Depth first from the tasks in id order, then the collectives: each step comes
// right after the steps producing its inputs, so the order stays close to the
// plan's.
absl::Status StepGraph::TopologicalOrder() {
  const int n = num_steps();
  std::vector<char> state(n, 0);  // 0 new, 1 on the stack, 2 placed
  std::vector<std::pair<int, size_t>> stack;
  for (int root = 0; root < n; ++root) {
    if (state[root] != 0) continue;
    state[root] = 1;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      auto& [s, next] = stack.back();
      if (next < inputs(s).size()) {
        const int p = producer_[inputs(s)[next++]];
        if (p < 0 || state[p] == 2) continue;
        if (state[p] == 1) return Error("plan: ", Describe(p), " depends on its own output");
        state[p] = 1;
        stack.push_back({p, 0});
        continue;
      }
      state[s] = 2;
      position_[s] = static_cast<int>(topo_.size());
      topo_.push_back(s);
      stack.pop_back();
    }
  }
  return absl::OkStatus();
}

namespace {

int StepRank(const StepGraph& g, const Assignment& a, int s) {
  return a.rank_of_device[g.is_collective(s) ? g.collective(s).devices[0] : g.task(s).device];
}

absl::Status MapRanks(const Plan& plan, const StepGraph& g, Assignment& a) {
  const int64_t num_devices = plan.mesh.num_devices();
  const int pp_axis = plan.mesh.AxisIndex("pp");
  a.num_ranks = pp_axis >= 0 ? static_cast<int>(plan.mesh.axes()[pp_axis].size) : 1;
  a.rank_of_device.assign(num_devices, 0);
  if (pp_axis >= 0) {
    for (int64_t d = 0; d < num_devices; ++d) {
      a.rank_of_device[d] = static_cast<int>(plan.mesh.Coordinates(d)[pp_axis]);
    }
  }
  for (int s = 0; s < g.num_steps(); ++s) {
    std::vector<int64_t> devices =
        g.is_collective(s) ? g.collective(s).devices : std::vector<int64_t>{g.task(s).device};
    if (devices.empty()) return Error("plan: ", g.Describe(s), " has no device");
    for (int64_t d : devices) {
      if (d < 0 || d >= num_devices) {
        return Error("plan: ", g.Describe(s), ": device ", d, " is not in mesh ",
                     plan.mesh.ToString());
      }
    }
  }
  return absl::OkStatus();
}

// Stages of the tagged steps that are not transfers: their own, else that of the
// steps producing their inputs, else that of the steps reading their outputs,
// else the first stage of their rank.
absl::StatusOr<std::vector<int>> InferStages(const StepGraph& g, const Assignment& a,
                                             const std::vector<char>& in_block) {
  const int n = g.num_steps();
  std::vector<int> stage(n, -1);
  std::map<int, int> first_stage_of_rank;
  for (int s : g.topo()) {
    if (!in_block[s]) continue;
    if (!g.is_collective(s) && g.task(s).stage >= 0) {
      stage[s] = g.task(s).stage;
      auto [it, added] = first_stage_of_rank.emplace(StepRank(g, a, s), stage[s]);
      if (!added) it->second = std::min(it->second, stage[s]);
      continue;
    }
    for (ValueId v : g.inputs(s)) {
      const int p = g.producer(v);
      if (p >= 0 && in_block[p]) stage[s] = std::max(stage[s], stage[p]);
    }
  }
  const std::vector<int>& topo = g.topo();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int s = *it;
    if (!in_block[s] || stage[s] >= 0) continue;
    int best = std::numeric_limits<int>::max();
    for (ValueId v : g.outputs(s)) {
      for (int c : g.consumers(v)) {
        if (in_block[c] && stage[c] >= 0) best = std::min(best, stage[c]);
      }
    }
    if (best != std::numeric_limits<int>::max()) stage[s] = best;
  }
  for (int s = 0; s < n; ++s) {
    if (!in_block[s] || stage[s] >= 0) continue;
    auto it = first_stage_of_rank.find(StepRank(g, a, s));
    if (it == first_stage_of_rank.end()) {
      return Error("plan: ", g.Describe(s), ": no pipeline stage runs on its rank");
    }
    stage[s] = it->second;
  }
  return stage;
}

bool HasOwnStage(const StepGraph& g, int s) { return !g.is_collective(s) && g.task(s).stage >= 0; }

// Steps without a stage of their own that prepare a value for a send to another
// rank (a slice, or its clone re-run for a recomputed consumer) run with the step
// producing that value, whatever phase their consumer has: the send cannot wait
// for a later block of the sending rank.
void FollowSenders(const StepGraph& g, const Assignment& a, const std::vector<char>& in_block,
                   std::vector<int>& stage, std::vector<char>& forward) {
  const int n = g.num_steps();
  std::vector<char> feeds_send(n, 0);
  const std::vector<int>& topo = g.topo();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int s = *it;
    if (!in_block[s] || HasOwnStage(g, s)) continue;
    for (ValueId v : g.outputs(s)) {
      for (int c : g.consumers(v)) {
        feeds_send[s] |= a.step_block[c] == kBetweenRanks || feeds_send[c];
      }
    }
  }
  for (int s : topo) {
    if (!feeds_send[s]) continue;
    for (ValueId v : g.inputs(s)) {
      const int p = g.producer(v);
      if (p < 0 || !in_block[p]) continue;
      stage[s] = stage[p];
      forward[s] = forward[p];
      break;
    }
  }
}

// A block step reading a value of a block numbered after its own (a block that
// runs later in the pipeline order) would make the blocks wait for each other.
// When nothing in the blocks reads the step (the sum of a tied embedding's two
// gradient contributions, which only the accumulation over micro-batches reads),
// it moves after the blocks, with the block steps that read it; anything else is
// an error.
absl::Status MoveLateSinks(const StepGraph& g, Assignment& a) {
  const int n = g.num_steps();
  std::vector<char> only_after(n, 0);  // every reader is untagged or only_after
  const std::vector<int>& topo = g.topo();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int s = *it;
    bool ok = true;
    for (ValueId v : g.outputs(s)) {
      for (int c : g.consumers(v)) {
        ok &= g.microbatch(c) < 0 ? a.step_block[c] == kAfterBlocks : only_after[c] != 0;
      }
    }
    only_after[s] = ok;
  }
  std::vector<int> source(n, -1);  // per step: the latest block among its inputs' producers
  for (int s : topo) {
    const int b = a.step_block[s];
    if (b < 0 && b != kBetweenRanks) continue;
    int latest = -1;
    bool after = false;
    for (ValueId v : g.inputs(s)) {
      const int p = g.producer(v);
      if (p < 0) continue;
      after |= g.microbatch(p) >= 0 && a.step_block[p] == kAfterBlocks;
      latest = std::max(latest, a.step_block[p] >= 0 ? a.step_block[p] : source[p]);
    }
    source[s] = b == kBetweenRanks ? latest : b;
    if (b < 0 || (!after && latest <= b)) continue;
    if (!only_after[s]) {
      return Error("plan: ", g.Describe(s), " of block ", a.blocks[b].name,
                   after ? " reads a value computed after the blocks"
                         : absl::StrCat(" reads a value of block ", a.blocks[latest].name),
                   ", which runs later, and blocks depend on it");
    }
    a.step_block[s] = kAfterBlocks;
  }
  return absl::OkStatus();
}

// Blocks F0..F<S-1>, B<S-1>..B0 for the (stage, phase) pairs that have steps.
absl::Status MakeBlocks(const StepGraph& g, const std::vector<int>& stage,
                        const std::vector<char>& forward, const std::vector<char>& in_block,
                        Assignment& a) {
  const int n = g.num_steps();
  int num_stages = 0;
  for (int s = 0; s < n; ++s) num_stages = std::max(num_stages, stage[s] + 1);
  std::vector<int> stage_rank(num_stages, -1);
  std::vector<std::vector<char>> used(2, std::vector<char>(num_stages, 0));  // [F, B]
  for (int s = 0; s < n; ++s) {
    if (!in_block[s]) continue;
    const int st = stage[s];
    std::vector<int64_t> devices =
        g.is_collective(s) ? g.collective(s).devices : std::vector<int64_t>{g.task(s).device};
    for (int64_t d : devices) {
      const int r = a.rank_of_device[d];
      if (stage_rank[st] < 0) stage_rank[st] = r;
      if (stage_rank[st] != r) {
        return Error("plan: ", g.Describe(s), ": stage ", st, " runs on pipeline ranks ",
                     stage_rank[st], " and ", r);
      }
    }
    used[forward[s] ? 0 : 1][st] = 1;
  }
  std::vector<std::vector<int>> block_of(2, std::vector<int>(num_stages, -1));
  auto add = [&](int kind, int st) {
    Block b;
    b.name = absl::StrCat(kind == 0 ? "F" : "B", st);
    b.kind = kind == 0 ? BlockKind::kForward : BlockKind::kBackward;
    b.stage = st;
    b.devices = {stage_rank[st]};
    block_of[kind][st] = static_cast<int>(a.blocks.size());
    a.blocks.push_back(std::move(b));
  };
  for (int st = 0; st < num_stages; ++st) {
    if (used[0][st]) add(0, st);
  }
  a.forward_of_stage = block_of[0];
  for (int st = num_stages - 1; st >= 0; --st) {
    if (used[1][st]) add(1, st);
  }
  for (int s = 0; s < n; ++s) {
    if (in_block[s]) a.step_block[s] = block_of[forward[s] ? 0 : 1][stage[s]];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Assignment> AssignBlocks(const Plan& plan, const StepGraph& g) {
  Assignment a;
  LOOM_RETURN_IF_ERROR(MapRanks(plan, g, a));
  const int n = g.num_steps();
  a.step_block.assign(n, kAfterBlocks);
  std::vector<char> in_block(n, 0);
  for (int s = 0; s < n; ++s) {
    if (g.microbatch(s) < 0) continue;
    const bool transfer = g.is_collective(s) && g.collective(s).kind == CollectiveKind::kSendRecv &&
                          g.collective(s).devices.size() == 2 &&
                          a.rank_of_device[g.collective(s).devices[0]] !=
                              a.rank_of_device[g.collective(s).devices[1]];
    if (transfer) a.step_block[s] = kBetweenRanks;
    in_block[s] = !transfer;
  }
  // Untagged steps that a tagged step depends on run before the blocks.
  std::vector<char> feeds_tagged(n, 0);
  const std::vector<int>& topo = g.topo();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int s = *it;
    for (ValueId v : g.outputs(s)) {
      for (int c : g.consumers(v)) feeds_tagged[s] |= g.microbatch(c) >= 0 || feeds_tagged[c];
    }
    if (g.microbatch(s) < 0 && feeds_tagged[s]) a.step_block[s] = kBeforeBlocks;
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int> stage, InferStages(g, a, in_block));
  std::vector<char> forward(n, 0);
  for (int s = 0; s < n; ++s) forward[s] = g.is_forward(s);
  FollowSenders(g, a, in_block, stage, forward);
  LOOM_RETURN_IF_ERROR(MakeBlocks(g, stage, forward, in_block, a));
  LOOM_RETURN_IF_ERROR(MoveLateSinks(g, a));
  return a;
}

int PlanMicrobatches(const Plan& plan, const StepGraph& g) {
  if (plan.is_factored()) return plan.factoring->microbatches;
  int m = 0;
  for (int s = 0; s < g.num_steps(); ++s) m = std::max(m, g.microbatch(s) + 1);
  return std::max(m, 1);
}

}  // namespace loom::schedule::internal
