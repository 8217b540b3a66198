#include "transform/balanced_chunks.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::transform {
namespace {

using ir::Collective;
using ir::CollectiveKind;
using ir::PlanValue;
using ir::Task;
using ir::ValueId;

// A task or a collective of the plan.
using Item = ir::PlanStep;

bool SameClaim(const PlanValue& a, const PlanValue& b) {
  return a.device == b.device && a.sub == b.sub && a.dtype == b.dtype &&
         a.microbatch == b.microbatch && a.dp_dim == b.dp_dim && a.dp_share == b.dp_share;
}

// A value's claim as a hash key (the value outlives the key).
struct ClaimKey {
  const PlanValue* v;
  bool operator==(const ClaimKey& o) const { return SameClaim(*v, *o.v); }
  template <typename H>
  friend H AbslHashValue(H h, const ClaimKey& k) {
    h = H::combine(std::move(h), k.v->device, k.v->sub.tensor, k.v->microbatch, k.v->dtype);
    for (const ir::Interval& iv : k.v->sub.box) h = H::combine(std::move(h), iv.begin, iv.end);
    return h;
  }
};

class Folder {
 public:
  Folder(ir::Plan plan, int cp) : plan_(std::move(plan)), cp_(cp) {}
  absl::StatusOr<ir::Plan> Run();

 private:
  int CpCoordinate(int64_t virtual_device) const {
    return static_cast<int>(virtual_mesh_.Coordinates(virtual_device)[cp_axis_]);
  }
  int64_t Fold(int64_t virtual_device) const;
  ValueId Resolve(ValueId v) const {
    while (alias_[v] != v) v = alias_[v];
    return v;
  }
  void Alias(ValueId from, ValueId to) { alias_[from] = to; }
  ValueId NewValue(const PlanValue& like);
  void EmitLocal(ir::OpKind kind, ir::AttrMap attrs, const ir::OpInfo& info, bool recompute,
                 std::vector<ValueId> inputs, ValueId output);
  static ir::OpInfo InfoOf(const Collective& c) { return {c.phase, c.layer, c.microbatch}; }
  Collective HalfOf(const Collective& c, int first) const;
  // A local sum of two partial values of one piece on one device.
  absl::StatusOr<ValueId> SumOfTwo(ValueId a, ValueId b, const Collective& c,
                                   const ir::OpInfo& info);
  // The accumulated partial sums of virtual members i and 2 * cp - 1 - i of `c`.
  absl::StatusOr<ValueId> PairSum(const Collective& c, int i);
  absl::StatusOr<ValueId> SliceAlong(ValueId v, int dim, const ir::Interval& want,
                                     const Collective& from);
  absl::Status FoldCollective(ir::CollectiveId id);
  void MergeEqualInputs();
  void MergeRepeatedWork();
  bool Repeats(const Item& x, const Item& y) const;
  const std::vector<ValueId>& Inputs(const Item& x) const {
    return x.is_collective ? plan_.collectives[x.id].inputs : plan_.tasks[x.id].inputs;
  }
  const std::vector<ValueId>& Outputs(const Item& x) const {
    return x.is_collective ? plan_.collectives[x.id].outputs : plan_.tasks[x.id].outputs;
  }
  void Compact();

  ir::Plan plan_;
  const int cp_;
  ir::Mesh virtual_mesh_;
  ir::Mesh physical_mesh_;
  int cp_axis_ = -1;
  std::vector<ValueId> alias_;
  // Before folding: each value's producing task (kNoId for none or a collective)
  // and how many tasks and collectives read it.
  std::vector<ir::TaskId> producer_;
  std::vector<int> readers_;
  std::vector<char> task_dropped_;
  std::vector<char> collective_dropped_;
  ir::TaskId num_planned_tasks_ = 0;  // tasks before folding; later ones it added
};

int64_t Folder::Fold(int64_t virtual_device) const {
  std::vector<int64_t> c = virtual_mesh_.Coordinates(virtual_device);
  c[cp_axis_] = std::min<int64_t>(c[cp_axis_], 2 * cp_ - 1 - c[cp_axis_]);
  return physical_mesh_.Device(c);
}

ValueId Folder::NewValue(const PlanValue& like) {
  PlanValue v = like;
  v.id = static_cast<ValueId>(plan_.values.size());
  plan_.values.push_back(std::move(v));
  alias_.push_back(plan_.values.back().id);
  return plan_.values.back().id;
}

void Folder::EmitLocal(ir::OpKind kind, ir::AttrMap attrs, const ir::OpInfo& info,
                       bool recompute, std::vector<ValueId> inputs, ValueId output) {
  Task t;
  t.id = static_cast<ir::TaskId>(plan_.tasks.size());
  t.op = ir::kNoId;
  t.kind = kind;
  t.attrs = std::move(attrs);
  t.device = plan_.values[output].device;
  t.info = info;
  t.recompute = recompute;
  t.inputs = std::move(inputs);
  t.outputs = {output};
  plan_.tasks.push_back(std::move(t));
  task_dropped_.push_back(0);
}

Collective Folder::HalfOf(const Collective& c, int first) const {
  Collective half = c;
  half.devices.clear();
  half.inputs.clear();
  half.outputs.clear();
  for (int i = first; i < first + cp_; ++i) half.devices.push_back(c.devices[i]);
  return half;
}

absl::StatusOr<ValueId> Folder::SumOfTwo(ValueId a_id, ValueId b_id, const Collective& c,
                                          const ir::OpInfo& info) {
  const PlanValue& a = plan_.values[a_id];
  const PlanValue& b = plan_.values[b_id];
  if (a.sub.tensor != b.sub.tensor || a.sub.box != b.sub.box || a.sub.scale != b.sub.scale ||
      a.dtype != b.dtype || a.microbatch != b.microbatch || a.device != b.device) {
    return absl::InternalError(absl::StrCat("collective ", c.id,
                                            ": a device's two context-parallel chunks hold "
                                            "different pieces to sum"));
  }
  LOOM_ASSIGN_OR_RETURN(ir::ValuePart part, a.sub.part.Union(b.sub.part));
  PlanValue sum = a;
  sum.sub.part = part;
  const ValueId out = NewValue(sum);
  EmitLocal(ir::OpKind::kAccumulate, {}, info, c.recompute, {a_id, b_id}, out);
  return out;
}

absl::StatusOr<ValueId> Folder::PairSum(const Collective& c, int i) {
  const ValueId a = c.inputs[i];
  const ValueId b = c.inputs[2 * cp_ - 1 - i];
  // Two accumulations over the micro-batches, one per chunk, read by this
  // collective alone: one accumulation of the chunks' per-micro-batch sums, so the
  // device keeps one gradient buffer through the step, as a rank computing both
  // chunks in one pass does.
  const ir::TaskId ta = producer_[a], tb = producer_[b];
  if (ta != ir::kNoId && tb != ir::kNoId && readers_[a] == 1 && readers_[b] == 1) {
    const Task& x = plan_.tasks[ta];
    const Task& y = plan_.tasks[tb];
    if (x.kind == ir::OpKind::kAccumulate && y.kind == ir::OpKind::kAccumulate &&
        x.op == y.op && x.inputs.size() == y.inputs.size()) {
      LOOM_ASSIGN_OR_RETURN(ir::ValuePart part,
                            plan_.values[a].sub.part.Union(plan_.values[b].sub.part));
      // Copies: the sums below add tasks, which may move x and y.
      const std::vector<ValueId> first = x.inputs, second = y.inputs;
      std::vector<ValueId> sums;
      for (size_t k = 0; k < first.size(); ++k) {
        // The sum belongs where its first term was made (a backward piece).
        const ir::TaskId made = producer_[first[k]];
        const ir::OpInfo info = made == ir::kNoId ? InfoOf(c) : plan_.tasks[made].info;
        LOOM_ASSIGN_OR_RETURN(ValueId s, SumOfTwo(first[k], second[k], c, info));
        sums.push_back(s);
      }
      plan_.tasks[ta].inputs = std::move(sums);
      plan_.values[a].sub.part = part;
      task_dropped_[tb] = 1;
      return a;
    }
  }
  return SumOfTwo(a, b, c, InfoOf(c));
}

absl::StatusOr<ValueId> Folder::SliceAlong(ValueId v, int dim, const ir::Interval& want,
                                           const Collective& from) {
  PlanValue piece = plan_.values[v];
  const ir::Interval have = piece.sub.box[dim];
  if (piece.dp_dim == dim || want.begin < have.begin || want.end > have.end) {
    return absl::InternalError(absl::StrCat("collective ", from.id,
                                            ": cannot slice a context-parallel half"));
  }
  piece.sub.box[dim] = want;
  const ValueId out = NewValue(piece);
  EmitLocal(ir::OpKind::kSlice,
            {{"dim", int64_t{dim}},
             {"begin", want.begin - have.begin},
             {"end", want.end - have.begin}},
            InfoOf(from), from.recompute, {v}, out);
  return out;
}

absl::Status Folder::FoldCollective(ir::CollectiveId id) {
  const Collective c = plan_.collectives[id];
  std::vector<int64_t> folded;
  for (int64_t d : c.devices) folded.push_back(Fold(d));
  std::vector<int64_t> distinct = folded;
  std::sort(distinct.begin(), distinct.end());
  if (std::unique(distinct.begin(), distinct.end()) == distinct.end()) {
    plan_.collectives[id].devices = folded;
    return absl::OkStatus();
  }
  const int n = 2 * cp_;
  if (c.kind == CollectiveKind::kSendRecv) {
    // Between the two chunks of one device: the receiver reads the sender's value.
    if (!SameClaim(plan_.values[c.inputs[0]], plan_.values[c.outputs[0]])) {
      return absl::InternalError(
          absl::StrCat("collective ", id, ": a transfer within a device changes its value"));
    }
    Alias(c.outputs[0], c.inputs[0]);
    collective_dropped_[id] = 1;
    return absl::OkStatus();
  }
  bool cp_group = static_cast<int>(c.devices.size()) == n;
  for (int i = 0; cp_group && i < n; ++i) cp_group = CpCoordinate(c.devices[i]) == i;
  if (!cp_group) {
    return absl::InternalError(absl::StrCat(
        "collective ", id, " (", ir::CollectiveKindName(c.kind),
        ") meets a device twice but is not over the context-parallel ranks in order"));
  }
  if (c.kind != CollectiveKind::kAllGather && c.kind != CollectiveKind::kReduceScatter &&
      c.kind != CollectiveKind::kAllReduce) {
    return absl::UnimplementedError(
        absl::StrCat("collective ", id, ": a ", ir::CollectiveKindName(c.kind),
                     " over load-balanced context-parallel chunks"));
  }
  if (c.kind != CollectiveKind::kAllGather && c.reduce != ir::ReduceOp::kSum) {
    return absl::UnimplementedError(
        absl::StrCat("collective ", id, ": a reduction by ", ir::ReduceOpName(c.reduce),
                     " over load-balanced context-parallel chunks"));
  }
  // The first half over ranks 0 .. cp - 1, the second over the same ranks reversed.
  Collective first = HalfOf(c, 0), second = HalfOf(c, cp_);
  for (int64_t& d : first.devices) d = Fold(d);
  for (int64_t& d : second.devices) d = Fold(d);
  const int dim = c.dim;
  auto span = [&](const std::vector<ValueId>& values, int lo) -> absl::StatusOr<ir::Interval> {
    ir::Interval iv = plan_.values[values[lo]].sub.box[dim];
    for (int i = lo + 1; i < lo + cp_; ++i) {
      const ir::Interval& next = plan_.values[values[i]].sub.box[dim];
      if (next.begin != iv.end) {
        return absl::InternalError(absl::StrCat(
            "collective ", id, ": context-parallel chunks out of order along dim ", dim));
      }
      iv.end = next.end;
    }
    return iv;
  };
  if (c.kind == CollectiveKind::kAllGather) {
    LOOM_ASSIGN_OR_RETURN(const ir::Interval lo, span(c.inputs, 0));
    LOOM_ASSIGN_OR_RETURN(const ir::Interval hi, span(c.inputs, cp_));
    std::vector<ValueId> first_out(cp_), second_out(cp_);
    for (int i = 0; i < cp_; ++i) {
      PlanValue a = plan_.values[c.outputs[i]];
      a.sub.box[dim] = lo;
      first_out[i] = NewValue(a);
      PlanValue b = plan_.values[c.outputs[cp_ + i]];
      b.sub.box[dim] = hi;
      second_out[i] = NewValue(b);
      first.inputs.push_back(c.inputs[i]);
      first.outputs.push_back(first_out[i]);
      second.inputs.push_back(c.inputs[cp_ + i]);
      second.outputs.push_back(second_out[i]);
    }
    for (int i = 0; i < cp_; ++i) {
      const int twin = n - 1 - i;  // the virtual member on the same device
      if (!SameClaim(plan_.values[c.outputs[i]], plan_.values[c.outputs[twin]])) {
        return absl::InternalError(
            absl::StrCat("collective ", id, ": a device's two gathered values differ"));
      }
      EmitLocal(ir::OpKind::kConcat, {{"dim", int64_t{dim}}}, InfoOf(c), c.recompute,
                {first_out[i], second_out[twin - cp_]}, c.outputs[i]);
      Alias(c.outputs[twin], c.outputs[i]);
    }
  } else if (c.kind == CollectiveKind::kReduceScatter) {
    LOOM_ASSIGN_OR_RETURN(const ir::Interval lo, span(c.outputs, 0));
    LOOM_ASSIGN_OR_RETURN(const ir::Interval hi, span(c.outputs, cp_));
    std::vector<ValueId> low(cp_), high(cp_);
    for (int i = 0; i < cp_; ++i) {
      LOOM_ASSIGN_OR_RETURN(const ValueId sum, PairSum(c, i));
      LOOM_ASSIGN_OR_RETURN(low[i], SliceAlong(sum, dim, lo, c));
      LOOM_ASSIGN_OR_RETURN(high[i], SliceAlong(sum, dim, hi, c));
    }
    for (int i = 0; i < cp_; ++i) {
      first.inputs.push_back(low[i]);
      first.outputs.push_back(c.outputs[i]);
      second.inputs.push_back(high[cp_ - 1 - i]);  // member cp + i sits on rank cp - 1 - i
      second.outputs.push_back(c.outputs[cp_ + i]);
    }
  } else {  // all-reduce
    for (int i = 0; i < cp_; ++i) {
      const int twin = n - 1 - i;
      if (!SameClaim(plan_.values[c.outputs[i]], plan_.values[c.outputs[twin]])) {
        return absl::InternalError(
            absl::StrCat("collective ", id, ": a device's two reduced values differ"));
      }
      LOOM_ASSIGN_OR_RETURN(const ValueId sum, PairSum(c, i));
      first.inputs.push_back(sum);
      first.outputs.push_back(c.outputs[i]);
      Alias(c.outputs[twin], c.outputs[i]);
    }
    plan_.collectives[id] = std::move(first);
    return absl::OkStatus();
  }
  plan_.collectives[id] = std::move(first);
  second.id = static_cast<ir::CollectiveId>(plan_.collectives.size());
  plan_.collectives.push_back(std::move(second));
  collective_dropped_.push_back(0);
  return absl::OkStatus();
}

void Folder::MergeEqualInputs() {
  std::vector<char> produced(plan_.values.size(), 0);
  for (const Task& t : plan_.tasks) {
    for (ValueId v : t.outputs) produced[v] = 1;
  }
  for (const Collective& c : plan_.collectives) {
    for (ValueId v : c.outputs) produced[v] = 1;
  }
  absl::flat_hash_map<ClaimKey, ValueId> first;
  for (const PlanValue& v : plan_.values) {
    // Skip results and values already read as another (a folded collective's
    // second output): only the plan's inputs merge.
    if (produced[v.id] || alias_[v.id] != v.id) continue;
    auto [it, inserted] = first.try_emplace(ClaimKey{&v}, v.id);
    if (!inserted) Alias(v.id, it->second);
  }
}

bool Folder::Repeats(const Item& x, const Item& y) const {
  if (x.is_collective != y.is_collective) return false;
  if (x.is_collective) {
    const Collective& a = plan_.collectives[x.id];
    const Collective& b = plan_.collectives[y.id];
    if (a.kind != b.kind || a.reduce != b.reduce || a.devices != b.devices || a.dim != b.dim ||
        a.dim2 != b.dim2 || a.microbatch != b.microbatch || a.phase != b.phase ||
        a.layer != b.layer || a.recompute != b.recompute || a.spans_dp != b.spans_dp) {
      return false;
    }
  } else {
    const Task& a = plan_.tasks[x.id];
    const Task& b = plan_.tasks[y.id];
    if (a.op != b.op || a.kind != b.kind || a.device != b.device || a.attrs != b.attrs ||
        a.info.phase != b.info.phase || a.info.layer != b.info.layer ||
        a.info.microbatch != b.info.microbatch || a.stage != b.stage ||
        a.recompute != b.recompute || a.dp_attr_steps != b.dp_attr_steps) {
      return false;
    }
  }
  const std::vector<ValueId>& xi = Inputs(x);
  const std::vector<ValueId>& yi = Inputs(y);
  if (xi.size() != yi.size()) return false;
  for (size_t i = 0; i < xi.size(); ++i) {
    if (Resolve(xi[i]) != Resolve(yi[i])) return false;
  }
  const std::vector<ValueId>& xo = Outputs(x);
  const std::vector<ValueId>& yo = Outputs(y);
  if (xo.size() != yo.size()) return false;
  for (size_t i = 0; i < xo.size(); ++i) {
    if (!SameClaim(plan_.values[xo[i]], plan_.values[yo[i]])) return false;
  }
  return true;
}

void Folder::MergeRepeatedWork() {
  std::vector<std::vector<Item>> readers(plan_.values.size());
  for (const Task& t : plan_.tasks) {
    for (ValueId v : t.inputs) readers[Resolve(v)].push_back({false, t.id});
  }
  for (const Collective& c : plan_.collectives) {
    if (collective_dropped_[c.id]) continue;
    for (ValueId v : c.inputs) readers[Resolve(v)].push_back({true, c.id});
  }
  auto dropped = [&](const Item& x) -> char& {
    return x.is_collective ? collective_dropped_[x.id] : task_dropped_[x.id];
  };
  std::deque<Item> pending;
  auto drop = [&](const Item& x, const Item& keep) {
    dropped(x) = 1;
    const std::vector<ValueId>& from = Outputs(x);
    const std::vector<ValueId>& to = Outputs(keep);
    for (size_t i = 0; i < from.size(); ++i) {
      Alias(from[i], to[i]);
      std::vector<Item> moved = std::move(readers[from[i]]);
      readers[from[i]].clear();
      for (const Item& r : moved) {
        readers[to[i]].push_back(r);
        pending.push_back(r);
      }
    }
  };
  // Tasks reading nothing (the zero fills of a share a device does not hold): the
  // two virtual ranks' fills of one piece are one.
  absl::flat_hash_map<std::tuple<int64_t, ir::OpId, int, ir::TensorId, int>, std::vector<int32_t>>
      fills;
  for (const Task& t : plan_.tasks) {
    if (!t.inputs.empty() || t.outputs.empty()) continue;
    const PlanValue& out = plan_.values[t.outputs[0]];
    std::vector<int32_t>& same =
        fills[{t.device, t.op, static_cast<int>(t.kind), out.sub.tensor, out.microbatch}];
    const Item x{false, t.id};
    bool merged = false;
    for (int32_t other : same) {
      if (Repeats(x, Item{false, other})) {
        drop(x, Item{false, other});
        merged = true;
        break;
      }
    }
    if (!merged) same.push_back(t.id);
  }
  // Otherwise work repeats only where two items read one value: start from every
  // value read more than once.
  for (const std::vector<Item>& r : readers) {
    if (r.size() > 1) pending.insert(pending.end(), r.begin(), r.end());
  }
  while (!pending.empty()) {
    const Item x = pending.front();
    pending.pop_front();
    if (dropped(x) || Inputs(x).empty()) continue;
    const Item* twin = nullptr;
    for (const Item& y : readers[Resolve(Inputs(x)[0])]) {
      if ((y.is_collective != x.is_collective || y.id != x.id) && !dropped(y) &&
          Repeats(x, y)) {
        twin = &y;
        break;
      }
    }
    if (twin == nullptr) continue;
    const Item keep = *twin;  // drop() may grow the list `twin` points into
    drop(x, keep);
  }
}

void Folder::Compact() {
  auto resolve_all = [&](std::vector<ValueId>& ids) {
    for (ValueId& v : ids) v = Resolve(v);
  };
  std::vector<ValueId> value_id(plan_.values.size(), ir::kNoId);
  std::vector<PlanValue> values;
  auto keep_value = [&](ValueId& v) {
    if (value_id[v] == ir::kNoId) {
      value_id[v] = static_cast<ValueId>(values.size());
      values.push_back(plan_.values[v]);
      values.back().id = value_id[v];
    }
    v = value_id[v];
  };
  // Values keep their relative order: inputs and results stay where they were.
  std::vector<char> used(plan_.values.size(), 0);
  // Tasks too, and each added task goes right after the last task it reads from
  // (orders follow the plan's where the data flow allows: a sum of two chunks'
  // gradients runs as soon as they are made, not after the whole block).
  for (Task& t : plan_.tasks) resolve_all(t.inputs);
  std::vector<ir::TaskId> made_by(plan_.values.size(), ir::kNoId);
  std::vector<ir::TaskId> place(plan_.tasks.size());
  for (Task& t : plan_.tasks) {
    place[t.id] = t.id;
    if (t.id >= num_planned_tasks_) {
      place[t.id] = -1;
      for (ValueId v : t.inputs) {
        if (made_by[v] != ir::kNoId) place[t.id] = std::max(place[t.id], place[made_by[v]]);
      }
    }
    for (ValueId v : t.outputs) made_by[v] = t.id;
  }
  std::vector<ir::TaskId> by_place(plan_.tasks.size());
  for (ir::TaskId i = 0; i < static_cast<ir::TaskId>(by_place.size()); ++i) by_place[i] = i;
  std::stable_sort(by_place.begin(), by_place.end(),
                   [&](ir::TaskId a, ir::TaskId b) { return place[a] < place[b]; });
  std::vector<Task> tasks;
  for (ir::TaskId id : by_place) {
    Task& t = plan_.tasks[id];
    if (task_dropped_[t.id]) continue;
    for (ValueId v : t.inputs) used[v] = 1;
    for (ValueId v : t.outputs) used[v] = 1;
    t.id = static_cast<ir::TaskId>(tasks.size());
    tasks.push_back(std::move(t));
  }
  std::vector<Collective> collectives;
  for (Collective& c : plan_.collectives) {
    if (collective_dropped_[c.id]) continue;
    resolve_all(c.inputs);
    for (ValueId v : c.inputs) used[v] = 1;
    for (ValueId v : c.outputs) used[v] = 1;
    c.id = static_cast<ir::CollectiveId>(collectives.size());
    collectives.push_back(std::move(c));
  }
  std::vector<ValueId> outputs;
  std::vector<char> listed(plan_.values.size(), 0);
  for (ValueId v : plan_.outputs) {
    v = Resolve(v);
    if (listed[v]) continue;
    listed[v] = used[v] = 1;
    outputs.push_back(v);
  }
  for (ValueId v = 0; v < static_cast<ValueId>(plan_.values.size()); ++v) {
    if (used[v]) {
      ValueId id = v;
      keep_value(id);
    }
  }
  for (Task& t : tasks) {
    for (ValueId& v : t.inputs) keep_value(v);
    for (ValueId& v : t.outputs) keep_value(v);
  }
  for (Collective& c : collectives) {
    for (ValueId& v : c.inputs) keep_value(v);
    for (ValueId& v : c.outputs) keep_value(v);
  }
  for (ValueId& v : outputs) keep_value(v);
  plan_.values = std::move(values);
  plan_.tasks = std::move(tasks);
  plan_.collectives = std::move(collectives);
  plan_.outputs = std::move(outputs);
}

absl::StatusOr<ir::Plan> Folder::Run() {
  virtual_mesh_ = plan_.mesh;
  cp_axis_ = virtual_mesh_.AxisIndex("cp");
  if (cp_axis_ < 0 || virtual_mesh_.AxisSize("cp") != 2 * cp_) {
    return absl::InternalError(absl::StrCat("folding balanced chunks needs a cp axis of ",
                                            2 * cp_, " virtual ranks, the plan's mesh is ",
                                            virtual_mesh_.ToString()));
  }
  if (!plan_.order.empty() || !plan_.factored_order.empty()) {
    return absl::InternalError("folding balanced chunks needs an unordered plan");
  }
  std::vector<ir::MeshAxis> axes = virtual_mesh_.axes();
  axes[cp_axis_].size = cp_;
  physical_mesh_ = ir::Mesh(std::move(axes));
  alias_.resize(plan_.values.size());
  for (ValueId v = 0; v < static_cast<ValueId>(alias_.size()); ++v) alias_[v] = v;
  task_dropped_.assign(plan_.tasks.size(), 0);
  num_planned_tasks_ = static_cast<ir::TaskId>(plan_.tasks.size());
  collective_dropped_.assign(plan_.collectives.size(), 0);
  producer_.assign(plan_.values.size(), ir::kNoId);
  readers_.assign(plan_.values.size(), 0);
  for (const Task& t : plan_.tasks) {
    for (ValueId v : t.outputs) producer_[v] = t.id;
    for (ValueId v : t.inputs) ++readers_[v];
  }
  for (const Collective& c : plan_.collectives) {
    for (ValueId v : c.inputs) ++readers_[v];
  }
  for (ValueId v : plan_.outputs) ++readers_[v];
  for (PlanValue& v : plan_.values) v.device = Fold(v.device);
  for (Task& t : plan_.tasks) t.device = Fold(t.device);
  const auto num_collectives = static_cast<ir::CollectiveId>(plan_.collectives.size());
  for (ir::CollectiveId c = 0; c < num_collectives; ++c) {
    LOOM_RETURN_IF_ERROR(FoldCollective(c));
  }
  MergeEqualInputs();
  MergeRepeatedWork();
  Compact();
  plan_.mesh = physical_mesh_;
  if (plan_.factoring.has_value() && plan_.factoring->dp_device_stride > 0) {
    plan_.factoring->dp_device_stride =
        physical_mesh_.num_devices() / std::max<int64_t>(1, plan_.factoring->dp);
  }
  return std::move(plan_);
}

}  // namespace

absl::StatusOr<ir::Plan> FoldBalancedChunks(ir::Plan plan, int cp) {
  Folder folder(std::move(plan), cp);
  return folder.Run();
}

}  // namespace loom::transform
