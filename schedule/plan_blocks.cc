#include "schedule/plan_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

using ir::Collective;
using ir::CollectiveKind;
using ir::Plan;
using ir::PlanStep;
using ir::Task;
using ir::ValueId;

template <typename... Args>
absl::Status Error(Args&&... args) {
  return absl::InvalidArgumentError(absl::StrCat(std::forward<Args>(args)...));
}

// ---------------------------------------------------------------------------
// The tasks and collectives of a plan as one list of steps (task t is step t,
// collective c is step num_tasks + c) with the data flow between them.
class StepGraph {
 public:
  static absl::StatusOr<StepGraph> Build(const Plan& plan);

  int num_steps() const { return static_cast<int>(position_.size()); }
  int num_tasks() const { return num_tasks_; }
  bool is_collective(int s) const { return s >= num_tasks_; }
  const Task& task(int s) const { return plan_->tasks[s]; }
  const Collective& collective(int s) const { return plan_->collectives[s - num_tasks_]; }
  const std::vector<ValueId>& inputs(int s) const {
    return is_collective(s) ? collective(s).inputs : task(s).inputs;
  }
  const std::vector<ValueId>& outputs(int s) const {
    return is_collective(s) ? collective(s).outputs : task(s).outputs;
  }
  int microbatch(int s) const {
    return is_collective(s) ? collective(s).microbatch : task(s).info.microbatch;
  }
  // Forward and not recomputed.
  bool is_forward(int s) const {
    return is_collective(s) ? collective(s).phase == ir::Phase::kForward && !collective(s).recompute
                            : task(s).info.phase == ir::Phase::kForward && !task(s).recompute;
  }
  int producer(ValueId v) const { return producer_[v]; }
  absl::Span<const int> consumers(ValueId v) const {
    return absl::MakeConstSpan(consumers_)
        .subspan(consumer_begin_[v], consumer_begin_[v + 1] - consumer_begin_[v]);
  }
  const std::vector<int>& topo() const { return topo_; }
  int position(int s) const { return position_[s]; }
  PlanStep plan_step(int s) const {
    return is_collective(s) ? PlanStep{true, s - num_tasks_} : PlanStep{false, s};
  }
  std::string Describe(int s) const;

 private:
  absl::Status TopologicalOrder();

  const Plan* plan_ = nullptr;
  int num_tasks_ = 0;
  std::vector<int> producer_;        // per value: step, -1 for plan inputs
  std::vector<int> consumer_begin_;  // per value + 1: offsets into consumers_
  std::vector<int> consumers_;       // steps reading each value, with multiplicity
  std::vector<int> topo_;
  std::vector<int> position_;  // per step: index in topo_
};

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

// ---------------------------------------------------------------------------
// Which block each step belongs to.
struct Assignment {
  std::vector<int> step_block;        // per step: block id or kBeforeBlocks, ...
  std::vector<Block> blocks;          // names, kinds, stages and devices only
  std::vector<int> rank_of_device;    // per mesh device: its pipeline rank
  std::vector<int> forward_of_stage;  // per stage: its F block, -1 when none
  int num_ranks = 1;
};

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

// ---------------------------------------------------------------------------
// Costs.

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
        for (auto [src, lag] : from[v]) {
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
  if (unit <= 0) unit = longest > 0 ? longest / 100 : 1.0;
  out.seconds_per_unit = unit;
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

// ---------------------------------------------------------------------------
// ApplySchedule.

namespace {

absl::StatusOr<Plan> ExplicitPlan(const ir::Graph& spec, const Plan& plan, int64_t max_steps) {
  if (!plan.is_factored()) return plan;
  const ir::Factoring& f = *plan.factoring;
  int64_t steps = 0;
  for (const Task& t : plan.tasks) steps += t.info.microbatch >= 0 ? f.microbatches : 1;
  for (const Collective& c : plan.collectives) steps += c.microbatch >= 0 ? f.microbatches : 1;
  steps *= f.dp;
  if (steps > max_steps) {
    return Error("apply schedule: the plan is factored and expands to about ", steps,
                 " tasks and collectives, more than the ", max_steps,
                 " this step expands; make the plan with --explicit");
  }
  return ir::ExpandPlan(spec, plan);
}

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

absl::StatusOr<ir::Plan> ApplySchedule(const ir::Graph& spec, const ir::Plan& plan,
                                       const PlanBlocks& blocks, const Schedule& schedule,
                                       int64_t max_expanded_steps) {
  LOOM_RETURN_IF_ERROR(ir::ValidatePlan(spec, plan));
  LOOM_ASSIGN_OR_RETURN(Plan out, ExplicitPlan(spec, plan, max_expanded_steps));
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
  LOOM_ASSIGN_OR_RETURN(std::vector<DeviceProgram> programs,
                        DevicePrograms(out, g, a, schedule, *sim));
  Emitter emitter(out, g, std::move(programs));
  LOOM_ASSIGN_OR_RETURN(out.order, emitter.Run());
  return out;
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
