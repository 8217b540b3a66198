#include "schedule/placements.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

// Collects blocks with dependencies by name, then numbers them in chain order.
class Builder {
 public:
  Builder(std::string name, int devices) {
    model_.name = std::move(name);
    model_.num_devices = devices;
  }
  // Adds a block waiting for the named blocks (already added).
  void Add(std::string name, BlockKind kind, int64_t span, int64_t memory,
           std::vector<int> devices, const std::vector<std::string>& after, int stage = -1) {
    Block b;
    b.name = std::move(name);
    b.kind = kind;
    b.span = span;
    b.memory = memory;
    b.devices = std::move(devices);
    b.stage = stage;
    for (const std::string& p : after) b.preds.push_back(Dep{index_.at(p), 0});
    index_[b.name] = model_.num_blocks();
    model_.blocks.push_back(std::move(b));
  }
  // A chain of single-device blocks: each waits for the previous one (the first
  // for `after`). Returns the last block's name.
  std::string Chain(const std::string& prefix, BlockKind kind, int64_t span, int64_t memory,
                    const std::vector<int>& devices, std::string after) {
    for (int d : devices) {
      std::string name = absl::StrCat(prefix, d);
      Add(name, kind, span, memory, {d}, after.empty() ? std::vector<std::string>{}
                                                       : std::vector<std::string>{after});
      after = name;
    }
    return after;
  }
  std::vector<int> All() const {
    std::vector<int> all(model_.num_devices);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  // Renumbers blocks by (earliest start, lowest device, insertion order).
  BlockModel Finish() {
    const int n = model_.num_blocks();
    std::vector<int64_t> head(n, 0);
    for (int b = 0; b < n; ++b) {  // insertion order is topological
      for (const Dep& p : model_.blocks[b].preds) {
        head[b] = std::max(head[b], head[p.block] + model_.blocks[p.block].span);
      }
    }
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (head[a] != head[b]) return head[a] < head[b];
      return model_.blocks[a].devices.front() < model_.blocks[b].devices.front();
    });
    std::vector<int> new_id(n);
    for (int i = 0; i < n; ++i) new_id[order[i]] = i;
    BlockModel out;
    out.name = model_.name;
    out.num_devices = model_.num_devices;
    for (int old : order) {
      Block b = model_.blocks[old];
      for (Dep& p : b.preds) p.block = new_id[p.block];
      out.blocks.push_back(std::move(b));
    }
    return out;
  }

 private:
  BlockModel model_;
  absl::flat_hash_map<std::string, int> index_;
};

std::vector<int> Range(int from, int to) {  // from..to inclusive, either direction
  std::vector<int> out;
  if (from <= to) {
    for (int d = from; d <= to; ++d) out.push_back(d);
  } else {
    for (int d = from; d >= to; --d) out.push_back(d);
  }
  return out;
}

constexpr BlockKind kF = BlockKind::kForward;
constexpr BlockKind kB = BlockKind::kBackward;

// F_i on device i down the devices, then B_i back up, optionally framed by blocks
// on every device.
BlockModel VLike(const std::string& name, int D, bool head_all, bool tail_all,
                 int64_t backward_span) {
  Builder g(name, D);
  std::string last;
  if (head_all) {
    g.Add("Fall", kF, 1, 0, g.All(), {});
    last = "Fall";
  }
  last = g.Chain("F", kF, 1, 1, Range(0, D - 1), last);
  last = g.Chain("B", kB, backward_span, -1, Range(D - 1, 0), last);
  if (tail_all) g.Add("Ball", kB, 1, 0, g.All(), {last});
  return g.Finish();
}

absl::StatusOr<BlockModel> MakeTraining(absl::string_view name, int D) {
  const std::string n(name);
  if (name == "vshape") return VLike(n, D, false, false, 3);
  if (name == "mshape") return VLike(n, D, true, true, 3);
  if (name == "finetune") {
    // The embedding on every device is frozen: no backward for it.
    return VLike(n, D, true, false, 2);
  }
  if (name == "xshape") {
    Builder g(n, D);
    std::string down = g.Chain("Fd", kF, 1, 1, Range(0, D - 1), "");
    g.Chain("Bd", kB, 3, -1, Range(D - 1, 0), down);
    std::string up = g.Chain("Fu", kF, 1, 1, Range(D - 1, 0), "");
    g.Chain("Bu", kB, 3, -1, Range(0, D - 1), up);
    return g.Finish();
  }
  if (name == "nnshape" || name == "nnshape_eager") {
    if (D % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement '", name, "' needs an even device count, got ", D));
    }
    if (name == "nnshape_eager" && D != 4) {
      return absl::InvalidArgumentError("placement 'nnshape_eager' is defined for 4 devices only");
    }
    // Encoder on the first half, decoder on the second, a shared embedding on every
    // device in front of each (nnshape_eager: the second one after the first stage).
    const int split = name == "nnshape" ? D / 2 : 1;
    Builder g(n, D);
    g.Add("Fall0", kF, 1, 0, g.All(), {});
    std::string last = g.Chain("F", kF, 1, 1, Range(0, split - 1), "Fall0");
    g.Add("Fall1", kF, 1, 0, g.All(), {last});
    last = g.Chain("F", kF, 1, 1, Range(split, D - 1), "Fall1");
    last = g.Chain("B", kB, 3, -1, Range(D - 1, split), last);
    g.Add("Ball1", kB, 1, 0, g.All(), {last});
    last = g.Chain("B", kB, 3, -1, Range(split - 1, 0), "Ball1");
    g.Add("Ball0", kB, 1, 0, g.All(), {last});
    return g.Finish();
  }
  if (name == "kshape") {
    if (D % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("placement 'kshape' needs an even device count, got ", D));
    }
    // Two modality branches on the two halves, a fusion part on every device, then
    // the branches' backward.
    Builder g(n, D);
    const std::string a = g.Chain("Fa", kF, 1, 1, Range(0, D / 2 - 1), "");
    const std::string b = g.Chain("Fb", kF, 1, 1, Range(D / 2, D - 1), "");
    g.Add("Fmm", kF, 1, 1, g.All(), {a, b});
    g.Add("Bmm", kB, 1, -1, g.All(), {"Fmm"});
    g.Chain("Ba", kB, 3, -1, Range(D / 2 - 1, 0), "Bmm");
    g.Chain("Bb", kB, 3, -1, Range(D - 1, D / 2), "Bmm");
    return g.Finish();
  }
  if (name == "mllm") {
    Builder g(n, D);
    g.Add("Fall0", kF, 1, 0, g.All(), {});
    std::string last = g.Chain("F", kF, 1, 1, Range(0, D - 1), "Fall0");
    g.Add("Fall1", kF, 1, 0, g.All(), {last});
    g.Add("Ball1", kB, 1, 0, g.All(), {"Fall1"});
    last = g.Chain("B", kB, 3, -1, Range(D - 1, 0), "Ball1");
    g.Add("Ball0", kB, 1, 0, g.All(), {last});
    return g.Finish();
  }
  if (name == "alphafold") {
    // Three passes through the pipeline (recycling); only the last keeps
    // activations for the backward.
    Builder g(n, D);
    std::string last = g.Chain("F1_", kF, 1, 0, Range(0, D - 1), "");
    last = g.Chain("F2_", kF, 1, 0, Range(0, D - 1), last);
    last = g.Chain("F3_", kF, 1, 1, Range(0, D - 1), last);
    g.Chain("B", kB, 1, -1, Range(D - 1, 0), last);
    return g.Finish();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown placement '", name, "' (known: ",
                                                 absl::StrJoin(PlacementNames(), ", "), ")"));
}

}  // namespace

std::vector<std::string> PlacementNames() {
  return {"alphafold", "finetune", "kshape", "mllm", "mshape",
          "nnshape",   "nnshape_eager", "vshape", "xshape"};
}

absl::StatusOr<BlockModel> MakePlacement(absl::string_view name, int devices, bool inference) {
  if (devices < 2 || devices > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement '", name, "': device count must be in [2, 4096], got ", devices));
  }
  if (inference && name == "mllm") {
    return absl::InvalidArgumentError("placement 'mllm' has a training form only");
  }
  LOOM_ASSIGN_OR_RETURN(BlockModel model, MakeTraining(name, devices));
  if (!inference) return model;
  BlockModel infer = InferenceForm(model);
  infer.name = absl::StrCat(model.name, "-infer");
  return infer;
}

absl::StatusOr<BlockModel> MakeStageModel(int devices, int stages, absl::string_view layout,
                                          const StageCosts& c) {
  if (devices < 1 || stages < 1 || stages > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage model: need at least one device and one stage, got ", devices,
                     " devices and ", stages, " stages"));
  }
  if (c.forward <= 0 || c.backward_input <= 0 || c.backward_weight < 0 || c.comm < 0) {
    return absl::InvalidArgumentError(
        "stage model: forward and backward costs must be positive, weight and comm not negative");
  }
  std::vector<int> device_of(stages);
  if (layout == "loop") {
    if (stages % devices != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage model: ", stages, " stages do not divide evenly over ", devices, " devices"));
    }
    for (int s = 0; s < stages; ++s) device_of[s] = s % devices;
  } else if (layout == "v") {
    if (stages != 2 * devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage model: the v layout needs 2 stages per device (", 2 * devices, "), got ", stages));
    }
    for (int s = 0; s < stages; ++s) device_of[s] = s < devices ? s : 2 * devices - 1 - s;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("stage model: unknown layout '", layout, "' (known: loop, v)"));
  }
  const bool split = c.backward_weight > 0;
  if (split && (c.weight_memory < 0 || c.weight_memory > c.activation)) {
    return absl::InvalidArgumentError(
        "stage model: the weight backward cannot free more than the forward kept");
  }
  BlockModel m;
  m.name = absl::StrCat("stages-", layout, "-", devices, "x", stages);
  m.num_devices = devices;
  auto lag = [&](int s, int t) { return device_of[s] == device_of[t] ? 0 : c.comm; };
  for (int s = 0; s < stages; ++s) {
    Block f;
    f.name = absl::StrCat("F", s);
    f.kind = BlockKind::kForward;
    f.stage = s;
    f.span = c.forward;
    f.memory = c.activation;
    f.devices = {device_of[s]};
    if (s > 0) f.preds.push_back(Dep{s - 1, lag(s - 1, s)});
    m.blocks.push_back(f);
  }
  std::vector<int> backward_id(stages);
  for (int s = stages - 1; s >= 0; --s) {
    Block b;
    b.name = absl::StrCat(split ? "I" : "B", s);
    b.kind = split ? BlockKind::kBackwardInput : BlockKind::kBackward;
    b.stage = s;
    b.span = c.backward_input;
    b.memory = split ? -(c.activation - c.weight_memory) : -c.activation;
    b.devices = {device_of[s]};
    if (s == stages - 1) {
      b.preds.push_back(Dep{stages - 1, 0});
    } else {
      b.preds.push_back(Dep{backward_id[s + 1], lag(s + 1, s)});
    }
    backward_id[s] = m.num_blocks();
    m.blocks.push_back(b);
  }
  if (split) {
    for (int s = stages - 1; s >= 0; --s) {
      Block w;
      w.name = absl::StrCat("W", s);
      w.kind = BlockKind::kBackwardWeight;
      w.stage = s;
      w.span = c.backward_weight;
      w.memory = -c.weight_memory;
      w.devices = {device_of[s]};
      w.preds.push_back(Dep{backward_id[s], 0});
      m.blocks.push_back(w);
    }
  }
  return m;
}

}  // namespace loom::schedule
