#include "verify/fold.h"

#include <algorithm>
#include <memory_resource>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "verify/scratch.h"

namespace loom::verify {

bool IdsInRange(const ir::Graph& spec, const ir::Plan& plan) {
  const ir::ValueId nv = static_cast<ir::ValueId>(plan.values.size());
  auto values_ok = [nv](const std::vector<ir::ValueId>& vs) {
    for (ir::ValueId v : vs) {
      if (v < 0 || v >= nv) return false;
    }
    return true;
  };
  for (const ir::Task& t : plan.tasks) {
    if (t.op < ir::kNoId || t.op >= spec.num_ops()) return false;
    if (!values_ok(t.inputs) || !values_ok(t.outputs)) return false;
  }
  for (const ir::Collective& c : plan.collectives) {
    if (!values_ok(c.inputs) || !values_ok(c.outputs)) return false;
  }
  return values_ok(plan.outputs);
}

LayerFold FoldLayers(const ir::Graph& spec, const ir::Plan& unit, const ir::MicrobatchMap& mbmap) {
  return *FoldLayers(spec, unit, [&mbmap] { return &mbmap; });
}

std::optional<LayerFold> FoldLayers(const ir::Graph& spec, const ir::Plan& unit,
                                    std::function<const ir::MicrobatchMap*()> await_mbmap,
                                    EncodeHelp* help) {
  LayerFold fold;
  StageOptions options;
  options.await_mbmap = std::move(await_mbmap);
  options.find_shares = true;
  options.value_stages = true;
  options.help = help;
  fold.unit = PartitionStages(spec, unit, options);
  if (fold.unit.no_map || fold.unit.ids_out_of_range) return std::nullopt;
  const StagePartition& parts = fold.unit;
  const int64_t nt = static_cast<int64_t>(unit.tasks.size());
  const int64_t nc = static_cast<int64_t>(unit.collectives.size());
  const int64_t nv = static_cast<int64_t>(unit.values.size());

  // The stage computing each value (kept index; -1 outside stages, -2 uncut).
  const std::vector<int>& value_stage = parts.value_stage;
  // Scratch memory for the passes over every value and tensor (verify/scratch.h).
  Scratch scratch(static_cast<size_t>(nv) + static_cast<size_t>(spec.num_tensors()) * sizeof(int) +
                  2 * 4096);
  // Per tensor, the stage of the plan outputs that hold it, when they all come
  // from one (kNone: no output holds it, kSeveral: outputs from several places).
  constexpr int kNone = -10, kSeveral = -11;
  std::pmr::vector<int> output_stage(spec.num_tensors(), kNone, &scratch);
  for (ir::ValueId v : unit.outputs) {
    const ir::TensorId t = unit.values[v].sub.tensor;
    if (t < 0 || t >= spec.num_tensors()) continue;
    int& stage = output_stage[t];
    if (stage == kNone) {
      stage = value_stage[v];
    } else if (stage != value_stage[v]) {
      stage = kSeveral;
    }
  }
  absl::flat_hash_set<ir::TensorId> spec_outputs(spec.outputs().begin(), spec.outputs().end());
  std::pmr::vector<char> listed(nv, 0, &scratch);
  for (ir::ValueId v : unit.outputs) listed[v] = 1;
  auto only_in = [&](ir::TensorId t, int stage) {
    return t >= 0 && t < spec.num_tensors() && output_stage[t] == stage;
  };

  fold.skip_tasks.assign(nt, 0);
  fold.skip_collectives.assign(nc, 0);
  fold.skip_outputs.assign(nv, 0);
  fold.value_member.assign(nv, -1);
  fold.value_position.assign(nv, -1);
  for (const std::vector<int>& cls : parts.classes) {
    if (cls.size() < 2) continue;
    const Stage& rep = parts.stages[cls[0]];
    // Outputs of each member must stand for themselves through the
    // representative's (see the header).
    absl::flat_hash_map<ir::TensorId, ir::TensorId> covered;
    bool foldable = true;
    for (size_t k = 1; k < cls.size() && foldable; ++k) {
      const Stage& m = parts.stages[cls[k]];
      for (size_t i = 0; i < m.values.size() && foldable; ++i) {
        const ir::ValueId v = m.values[i];
        if (!listed[v] || value_stage[v] != cls[k]) continue;
        const ir::TensorId t = unit.values[v].sub.tensor;
        const ir::TensorId r = unit.values[rep.values[i]].sub.tensor;
        foldable = only_in(t, cls[k]) && only_in(r, cls[0]) &&
                   spec_outputs.contains(t) == spec_outputs.contains(r);
        if (foldable) covered[t] = r;
      }
    }
    if (!foldable) continue;
    fold.reps.push_back(cls[0]);
    for (const auto& [t, r] : covered) fold.covered_by[t] = r;
    for (size_t k = 1; k < cls.size(); ++k) {
      const int member = static_cast<int>(fold.members.size());
      fold.members.push_back({cls[k], cls[0]});
      const Stage& m = parts.stages[cls[k]];
      for (int64_t i : m.items) {
        if (i < nt) {
          fold.skip_tasks[i] = 1;
        } else {
          fold.skip_collectives[i - nt] = 1;
        }
        ++fold.folded_items;
      }
      for (size_t i = 0; i < m.values.size(); ++i) {
        const ir::ValueId v = m.values[i];
        if (value_stage[v] != cls[k]) continue;
        fold.value_member[v] = member;
        fold.value_position[v] = static_cast<int>(i);
        if (listed[v]) fold.skip_outputs[v] = 1;
      }
    }
  }
  return fold;
}

}  // namespace loom::verify
