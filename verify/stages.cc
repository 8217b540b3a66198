#include "verify/stages.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory_resource>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "verify/scratch.h"
#include "verify/stage_encoding.h"

namespace loom::verify {
namespace {

using stage_encoding::EncodeInputs;
using stage_encoding::EncodeStage;
using stage_encoding::FlatIds;
using stage_encoding::Partners;
using stage_encoding::RenameTables;
using stage_encoding::Signature;

// Finds the opaque share groups of a plan (see StageOptions): values read across
// stages that claim a share of a sum, grouped by tensor, box, micro-batch and
// replication rule, where the group qualifies.
int FindShareGroups(const ir::Plan& plan, absl::Span<const int64_t> producer,
                    const std::vector<int>& item_stage, absl::Span<const char> crossing,
                    std::vector<int>& group_of) {
  const int64_t nv = static_cast<int64_t>(plan.values.size());
  group_of.assign(nv, -1);
  // tensor, micro-batch, replication rule, producing stage, then the box's bounds.
  using Key = std::vector<int64_t>;
  absl::flat_hash_map<Key, std::vector<ir::ValueId>> groups;
  std::vector<Key> order;
  for (ir::ValueId v = 0; v < nv; ++v) {
    if (!crossing[v]) continue;
    const ir::PlanValue& pv = plan.values[v];
    const ir::ValuePart& part = pv.sub.part;
    if (part.IsFull() || part.IsEmpty() || pv.dp_share || producer[v] < 0 ||
        pv.sub.combine != ir::ReduceOp::kSum || !pv.sub.scale.IsOne()) {
      continue;
    }
    Key k{pv.sub.tensor, pv.microbatch, pv.dp_dim, item_stage[producer[v]]};
    for (const ir::Interval& iv : pv.sub.box) {
      k.push_back(iv.begin);
      k.push_back(iv.end);
    }
    auto [it, fresh] = groups.try_emplace(k);
    if (fresh) order.push_back(k);
    it->second.push_back(v);
  }
  int count = 0;
  for (const Key& k : order) {
    const std::vector<ir::ValueId>& members = groups[k];
    const int stage = item_stage[producer[members[0]]];
    bool ok = true;
    std::vector<ir::ValuePart> parts;
    for (ir::ValueId v : members) {
      if (item_stage[producer[v]] != stage) {
        ok = false;
        break;
      }
      const ir::ValuePart& p = plan.values[v].sub.part;
      bool seen = false;
      for (const ir::ValuePart& q : parts) {
        if (q == p) {
          seen = true;
        } else if (!q.Disjoint(p)) {
          ok = false;
        }
      }
      if (!seen) parts.push_back(p);
    }
    if (!ok) continue;
    ir::ValuePart whole = ir::ValuePart::Empty();
    for (const ir::ValuePart& p : parts) whole = *whole.Union(p);
    if (!whole.IsFull()) continue;
    for (ir::ValueId v : members) group_of[v] = count;
    ++count;
  }
  return count;
}

// The counts of a plan's items: tasks, then collectives, then a slice's phantoms.
struct ItemCounts {
  int64_t nt = 0, nc = 0, np = 0, nitems = 0, nv = 0;
};

constexpr int kUnsetLayer = -2;

// One pass over the items' own records: their ids checked (false when one is
// out of range), their inputs and outputs counted, the tasks' layers read.
bool ReadItems(const ir::Graph& spec, const ir::Plan& plan, const SlicedPlan* sliced,
               const ItemCounts& n, std::pmr::vector<int>& layer, size_t& total_in,
               size_t& total_out) {
  const int64_t nt = n.nt, nc = n.nc, nv = n.nv;
  const ir::OpId num_ops = spec.num_ops();
  auto in_range = [nv](ir::ValueId v) { return v >= 0 && v < nv; };
  auto all_in_range = [&](const std::vector<ir::ValueId>& vs) {
    return std::all_of(vs.begin(), vs.end(), in_range);
  };
  bool ids_ok = all_in_range(plan.outputs);
  total_in = 2 * static_cast<size_t>(n.np);
  total_out = static_cast<size_t>(n.np);
  for (int64_t i = 0; i < nt; ++i) {
    const ir::Task& t = plan.tasks[i];
    ids_ok = ids_ok && t.op >= ir::kNoId && t.op < num_ops && all_in_range(t.inputs) &&
             all_in_range(t.outputs);
    total_in += t.inputs.size();
    total_out += t.outputs.size();
    layer[i] = std::max(t.info.layer, -1);
  }
  for (int64_t i = 0; i < nc; ++i) {
    const ir::Collective& c = plan.collectives[i];
    ids_ok = ids_ok && all_in_range(c.inputs) && all_in_range(c.outputs);
    total_in += c.inputs.size();
    total_out += c.outputs.size();
    // A transfer between pipeline stages goes with no layer: the layers on either
    // side of a pipeline cut then read and write alike.
    if (c.kind == ir::CollectiveKind::kSendRecv) layer[nt + i] = -1;
  }
  if (sliced != nullptr) {
    for (const Phantom& p : sliced->phantoms) {
      ids_ok = ids_ok && in_range(p.src0) && (p.src1 == ir::kNoId || in_range(p.src1)) &&
               in_range(p.value);
    }
    for (const auto& [a, b] : sliced->same_in_every_replica) {
      ids_ok = ids_ok && in_range(a) && in_range(b);
    }
    for (const auto& t : sliced->replica_checks) {
      ids_ok = ids_ok && in_range(t.r0) && in_range(t.r1) && in_range(t.last);
    }
  }
  return ids_ok;
}

// Every item's inputs and outputs, flattened.
void FlattenItems(const ir::Plan& plan, const SlicedPlan* sliced, const ItemCounts& n,
                  size_t total_in, size_t total_out, FlatIds& inputs, FlatIds& outputs) {
  const int64_t nt = n.nt, nc = n.nc, nitems = n.nitems;
  inputs.begin.assign(nitems + 1, 0);
  outputs.begin.assign(nitems + 1, 0);
  inputs.ids.reserve(total_in);
  outputs.ids.reserve(total_out);
  auto append = [](FlatIds& flat, const std::vector<ir::ValueId>& vs) {
    flat.ids.insert(flat.ids.end(), vs.begin(), vs.end());
  };
  for (int64_t i = 0; i < nitems; ++i) {
    if (i < nt) {
      append(inputs, plan.tasks[i].inputs);
      append(outputs, plan.tasks[i].outputs);
    } else if (i < nt + nc) {
      append(inputs, plan.collectives[i - nt].inputs);
      append(outputs, plan.collectives[i - nt].outputs);
    } else {
      const Phantom& p = sliced->phantoms[i - nt - nc];
      inputs.ids.push_back(p.src0);
      if (p.src1 != ir::kNoId) inputs.ids.push_back(p.src1);
      outputs.ids.push_back(p.value);
    }
    inputs.begin[i + 1] = static_cast<int64_t>(inputs.ids.size());
    outputs.begin[i + 1] = static_cast<int64_t>(outputs.ids.size());
  }
}

// The layer of every item. A task has its own (ReadItems). A collective whose
// outputs only tasks of one layer read belongs to that layer (it brings that
// layer's inputs into the layout they need, wherever they came from); any other
// collective, and a phantom, belongs to the layer whose items compute all it reads
// (so the collective that completes a layer's partial sums is cut with that
// layer), to none otherwise.
void AssignLayers(const ir::Plan& plan, const SlicedPlan* sliced, const ItemCounts& n,
                  const FlatIds& inputs, absl::Span<const int64_t> producer,
                  std::pmr::vector<int>& layer, Scratch& scratch) {
  const int64_t nt = n.nt, nc = n.nc, nitems = n.nitems;
  {
    constexpr int kMixed = -3;
    std::pmr::vector<int> served(nc, kUnsetLayer, &scratch);
    auto read_by = [&](ir::ValueId v, int reader_layer) {
      const int64_t p = producer[v];
      if (p < nt || p >= nt + nc) return;
      int& s = served[p - nt];
      s = reader_layer < 0                           ? kMixed
          : s == kUnsetLayer || s == reader_layer ? reader_layer
                                                  : kMixed;
    };
    for (int64_t i = 0; i < nitems; ++i) {
      const int reader_layer = i < nt ? layer[i] : kMixed;
      for (ir::ValueId v : inputs.of(i)) read_by(v, reader_layer);
    }
    for (ir::ValueId v : plan.outputs) read_by(v, kMixed);
    if (sliced != nullptr) {
      for (const auto& [a, b] : sliced->same_in_every_replica) {
        read_by(a, kMixed);
        read_by(b, kMixed);
      }
    }
    for (int64_t i = 0; i < nc; ++i) {
      if (layer[nt + i] == kUnsetLayer && served[i] >= 0) layer[nt + i] = served[i];
    }
  }
  std::vector<int64_t> stack;
  for (int64_t start = nt; start < nitems; ++start) {
    if (layer[start] != kUnsetLayer) continue;
    stack.push_back(start);
    while (!stack.empty()) {
      const int64_t i = stack.back();
      if (layer[i] != kUnsetLayer) {
        stack.pop_back();
        continue;
      }
      int common = kUnsetLayer;
      bool waiting = false;
      for (ir::ValueId v : inputs.of(i)) {
        const int64_t p = producer[v];
        if (p < 0) {
          common = -1;
          break;
        }
        if (layer[p] == kUnsetLayer) {
          stack.push_back(p);
          waiting = true;
          continue;
        }
        common = common == kUnsetLayer || common == layer[p] ? layer[p] : -1;
      }
      if (waiting) continue;
      layer[i] = common == kUnsetLayer ? -1 : common;
      stack.pop_back();
    }
  }
}

// The stages: the items of each layer (StagePartition::item_stage, Stage::items),
// in order of the layer's first item.
void GroupStages(absl::Span<const int> layer, StagePartition& out) {
  const int64_t nitems = static_cast<int64_t>(layer.size());
  absl::flat_hash_map<int, int> stage_of_layer;
  std::vector<int>& item_stage = out.item_stage;
  item_stage.assign(nitems, -1);
  int last_layer = -1, last_stage = -1;  // items of one layer mostly follow one another
  for (int64_t i = 0; i < nitems; ++i) {
    if (layer[i] < 0) continue;
    if (layer[i] != last_layer) {
      auto [it, fresh] =
          stage_of_layer.try_emplace(layer[i], static_cast<int>(out.stages.size()));
      if (fresh) {
        out.stages.emplace_back();
        out.stages.back().layer = layer[i];
        out.stages.back().index = it->second;
      }
      last_layer = layer[i];
      last_stage = it->second;
    }
    item_stage[i] = last_stage;
  }
  // Each stage's items, ascending, in one allocation per stage.
  {
    std::vector<int64_t> count(out.stages.size(), 0);
    for (int64_t i = 0; i < nitems; ++i) {
      if (item_stage[i] >= 0) ++count[item_stage[i]];
    }
    for (size_t k = 0; k < out.stages.size(); ++k) out.stages[k].items.reserve(count[k]);
    for (int64_t i = 0; i < nitems; ++i) {
      if (item_stage[i] >= 0) out.stages[item_stage[i]].items.push_back(i);
    }
  }
  out.layers = static_cast<int64_t>(out.stages.size());
}

// Which stages are cut (per stage), and each stage's boundary outputs: a stage
// that reads a share from outside is not cut, unless it reads it as an opaque
// share.
std::vector<bool> CutStages(const ir::Plan& plan, const ItemCounts& n, const FlatIds& inputs,
                            absl::Span<const int64_t> producer,
                            const std::vector<ir::ValueId>& listed,
                            const std::vector<int>* share_group, Scratch& scratch,
                            StagePartition& out) {
  const int64_t nitems = n.nitems, nv = n.nv;
  const std::vector<int>& item_stage = out.item_stage;
  auto from_stage = [&](ir::ValueId v) {
    const int64_t p = producer[v];
    return p >= 0 ? item_stage[p] : -1;
  };
  const bool factored = plan.is_factored();
  std::vector<bool> cut(out.stages.size(), true);
  std::pmr::vector<char> is_boundary_output(nv, 0, &scratch);
  auto claims_whole = [&](ir::ValueId v) {
    const ir::PlanValue& pv = plan.values[v];
    const ir::ValuePart& part = pv.sub.part;
    if (part.IsEmpty()) return true;
    if (part.IsFull()) return !(factored && pv.dp_share);
    return share_group != nullptr && (*share_group)[v] >= 0;
  };
  // claims_whole, once per value (2: not yet asked).
  std::pmr::vector<char> whole(nv, 2, &scratch);
  auto claims_whole_once = [&](ir::ValueId v) {
    if (whole[v] == 2) whole[v] = claims_whole(v) ? 1 : 0;
    return whole[v] == 1;
  };
  auto outside_read = [&](ir::ValueId v, int reader_stage) {
    const int from = from_stage(v);
    if (from == reader_stage) return;
    if (reader_stage >= 0 && !claims_whole_once(v)) cut[reader_stage] = false;
    if (from >= 0) is_boundary_output[v] = true;
  };
  for (int64_t i = 0; i < nitems; ++i) {
    for (ir::ValueId v : inputs.of(i)) outside_read(v, item_stage[i]);
  }
  for (ir::ValueId v : listed) outside_read(v, -1);
  for (ir::ValueId v = 0; v < nv; ++v) {
    if (is_boundary_output[v]) out.stages[item_stage[producer[v]]].boundary_outputs.push_back(v);
  }
  return cut;
}

// Per value: its replica-check partners and how the final checks list it.
void ListChecks(const ir::Plan& plan, const SlicedPlan* sliced, Partners& partners,
                std::pmr::vector<int>& listing) {
  for (ir::ValueId v : plan.outputs) listing[v] |= 1;
  if (sliced != nullptr) {
    for (const auto& t : sliced->replica_checks) {
      partners[t.r0] = {t.r1, t.last};
      partners[t.r1] = {t.r0, t.last};
      partners[t.last] = {t.r0, t.r1};
      listing[t.r0] |= 8;
      listing[t.r1] |= 16;
      listing[t.last] |= 32;
    }
    for (const auto& [a, b] : sliced->same_in_every_replica) {
      listing[a] |= 2;
      listing[b] |= 4;
      partners[a].push_back(b);
      partners[b].push_back(a);
    }
  }
}

// Classes of alike cut stages (`cut_list`: the stage of each kept index):
// stages whose signatures are equal. This thread takes the cut stages from the
// front, a helping one (`help`) from the back, each with its own rename tables and
// classes; a stage's signature is first compared with the representative of the
// class that worker's previous stage joined (alike layers follow one another),
// then looked up among the worker's classes by hash. Equality of signatures is an
// equivalence, so the merged classes are the same whoever encoded what; they are
// ordered by their first stage. Encoding gives each stage its renaming.
std::vector<std::vector<int>> ClassifyStages(const EncodeInputs& encode_inputs,
                                             const std::vector<int>& cut_list,
                                             EncodeHelp* help, std::vector<Stage>& stages) {
  struct Classes {
    std::vector<Signature> reps;
    std::vector<std::vector<int>> members;                  // kept indices
    absl::flat_hash_map<size_t, std::vector<int>> by_hash;  // hash -> classes

    // Adds `sig` (of kept stage `k`) to its class, trying `last` first; returns
    // the class.
    int Add(const Signature& sig, int k, int last) {
      if (last >= 0 && reps[last] == sig) {
        members[last].push_back(k);
        return last;
      }
      std::vector<int>& bucket = by_hash[sig.Hash()];
      for (int c : bucket) {
        if (reps[c] == sig) {
          members[c].push_back(k);
          return c;
        }
      }
      const int c = static_cast<int>(members.size());
      reps.push_back(sig);
      members.push_back({k});
      bucket.push_back(c);
      return c;
    }
  };
  std::mutex claim;
  int front = 0, back = static_cast<int>(cut_list.size());  // kept stages not taken yet
  auto work = [&](Classes& classes, bool from_back) {
    RenameTables tables(encode_inputs.spec, encode_inputs.plan);
    Signature sig;  // written stage by stage into the same buffers
    int last = -1;
    for (;;) {
      int k;
      {
        std::lock_guard<std::mutex> lock(claim);
        if (front >= back) return;
        k = from_back ? --back : front++;
      }
      const int s = cut_list[k];
      EncodeStage(encode_inputs, s, stages[s], tables, sig);
      last = classes.Add(sig, k, last);
    }
  };
  Classes mine[2];
  if (help != nullptr) {
    help->Offer([&] { work(mine[1], /*from_back=*/true); });
  }
  work(mine[0], /*from_back=*/false);
  if (help != nullptr) help->Withdraw();
  Classes merged;
  for (Classes& c : mine) {
    for (size_t i = 0; i < c.members.size(); ++i) {
      const int into = merged.Add(c.reps[i], c.members[i][0], -1);
      std::vector<int>& members = merged.members[into];
      members.insert(members.end(), c.members[i].begin() + 1, c.members[i].end());
    }
  }
  for (std::vector<int>& members : merged.members) std::sort(members.begin(), members.end());
  std::sort(merged.members.begin(), merged.members.end());
  return std::move(merged.members);
}

}  // namespace

StagePartition PartitionStages(const ir::Graph& spec, const ir::Plan& plan,
                               const StageOptions& options) {
  const SlicedPlan* sliced = options.sliced;
  const ir::MicrobatchMap* mbmap =
      options.mbmap != nullptr ? options.mbmap : sliced != nullptr ? &sliced->mbmap : nullptr;
  ItemCounts n;
  n.nt = static_cast<int64_t>(plan.tasks.size());
  n.nc = static_cast<int64_t>(plan.collectives.size());
  n.np = sliced == nullptr ? 0 : static_cast<int64_t>(sliced->phantoms.size());
  n.nitems = n.nt + n.nc + n.np;
  n.nv = static_cast<int64_t>(plan.values.size());
  const int64_t nitems = n.nitems, nv = n.nv;

  // The passes' per-item and per-value arrays are in scratch memory.
  constexpr size_t kSlack = 4096;  // per array, for alignment
  Scratch scratch(static_cast<size_t>(nitems) * sizeof(int) +
                  static_cast<size_t>(nv) * (sizeof(int64_t) + sizeof(int) + 3) +
                  static_cast<size_t>(n.nc) * sizeof(int) + 8 * kSlack);
  std::pmr::vector<int> layer(nitems, kUnsetLayer, &scratch);
  size_t total_in = 0, total_out = 0;
  if (!ReadItems(spec, plan, sliced, n, layer, total_in, total_out)) {
    StagePartition bad;
    bad.ids_out_of_range = true;
    return bad;
  }
  // Every item's inputs and outputs, and the producing item of every value.
  Scratch flat_scratch((total_in + total_out) * sizeof(ir::ValueId) +
                       2 * static_cast<size_t>(nitems + 1) * sizeof(int64_t) + 4 * kSlack);
  FlatIds inputs(&flat_scratch), outputs(&flat_scratch);
  FlattenItems(plan, sliced, n, total_in, total_out, inputs, outputs);
  std::pmr::vector<int64_t> producer(nv, -1, &scratch);
  for (int64_t i = 0; i < nitems; ++i) {
    for (ir::ValueId v : outputs.of(i)) producer[v] = i;
  }
  AssignLayers(plan, sliced, n, inputs, producer, layer, scratch);

  StagePartition out;
  GroupStages(layer, out);
  const std::vector<int>& item_stage = out.item_stage;

  // Values read across stages; the opaque share groups among them.
  std::vector<ir::ValueId> listed(plan.outputs.begin(), plan.outputs.end());
  if (sliced != nullptr) {
    for (const auto& [a, b] : sliced->same_in_every_replica) {
      listed.push_back(a);
      listed.push_back(b);
    }
  }
  const std::vector<int>* share_group = options.share_group;
  if (options.find_shares) {
    std::pmr::vector<char> crossing(nv, 0, &scratch);
    for (int64_t i = 0; i < nitems; ++i) {
      for (ir::ValueId v : inputs.of(i)) {
        const int64_t p = producer[v];
        if ((p >= 0 ? item_stage[p] : -1) != item_stage[i]) crossing[v] = 1;
      }
    }
    out.num_share_groups = FindShareGroups(plan, producer, item_stage, crossing, out.share_group);
    share_group = &out.share_group;
  }
  const std::vector<bool> cut =
      CutStages(plan, n, inputs, producer, listed, share_group, scratch, out);
  Partners partners;
  std::pmr::vector<int> listing(nv, 0, &scratch);
  ListChecks(plan, sliced, partners, listing);

  if (options.await_mbmap) {
    mbmap = options.await_mbmap();
    if (mbmap == nullptr) {
      out.no_map = true;
      out.stages.clear();
      return out;
    }
  }
  std::vector<int> cut_list;  // kept index -> stage
  std::vector<int> kept_index(out.stages.size(), -2);  // -2: not cut
  for (size_t s = 0; s < out.stages.size(); ++s) {
    if (!cut[s]) continue;
    kept_index[s] = static_cast<int>(cut_list.size());
    cut_list.push_back(static_cast<int>(s));
  }
  const EncodeInputs encode_inputs{spec,   plan,   sliced,  mbmap,    share_group, item_stage,
                                   producer, inputs, outputs, partners, listing};
  out.classes = ClassifyStages(encode_inputs, cut_list, options.help, out.stages);
  std::vector<Stage> kept;
  kept.reserve(cut_list.size());
  for (int s : cut_list) kept.push_back(std::move(out.stages[s]));
  if (options.value_stages) {
    out.value_stage.assign(nv, -1);
    for (ir::ValueId v = 0; v < nv; ++v) {
      const int64_t p = producer[v];
      if (p >= 0 && item_stage[p] >= 0) out.value_stage[v] = kept_index[item_stage[p]];
    }
  }
  out.stages = std::move(kept);
  return out;
}

void EncodeHelp::Help() {
  std::function<void()> job;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return job_ != nullptr || closed_ || over_; });
    if (job_ == nullptr) return;
    job = std::move(job_);
    job_ = nullptr;
    running_ = true;
  }
  job();
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
  changed_.notify_all();
}

void EncodeHelp::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  job_ = nullptr;
  changed_.notify_all();
}

void EncodeHelp::Offer(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  job_ = std::move(job);
  changed_.notify_all();
}

void EncodeHelp::Withdraw() {
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = nullptr;
  over_ = true;
  changed_.notify_all();
  changed_.wait(lock, [&] { return !running_; });
}

}  // namespace loom::verify
