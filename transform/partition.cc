#include "transform/partition.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "transform/conversion.h"

namespace loom::transform {

using ir::AttrMap;
using ir::Box;
using ir::CollectiveKind;
using ir::Graph;
using ir::Op;
using ir::OpId;
using ir::OpInfo;
using ir::OpKind;
using ir::Plan;
using ir::SubTensor;
using ir::TensorId;
using ir::TensorType;
using ir::ValueId;
using ir::ValuePart;

std::string LayoutToString(const Layout& layout) {
  std::vector<std::string> parts;
  for (const AxisLayout& a : layout) {
    switch (a.kind) {
      case AxisKind::kReplicated:
        parts.push_back("R");
        break;
      case AxisKind::kSharded:
        parts.push_back(absl::StrCat("S", a.dim));
        break;
      case AxisKind::kPartial:
        parts.push_back(a.reduce == ir::ReduceOp::kMax ? "Pmax" : "P");
        break;
    }
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<OpLayouts> LayoutsOf(const Graph& spec, const Op& op,
                                    const PartitionSpec& partition) {
  std::vector<TensorType> in_types, out_types;
  for (TensorId t : op.inputs) in_types.push_back(spec.tensor(t).type());
  for (TensorId t : op.outputs) out_types.push_back(spec.tensor(t).type());
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig,
                        ir::GetOpSchema(op.kind).signature(in_types, op.attrs));
  const OpPartition& p = partition.ops[op.id];
  const int num_axes = static_cast<int>(partition.grid_axes.size());
  OpLayouts result;
  result.inputs.assign(op.inputs.size(), Layout(num_axes));
  result.outputs.assign(op.outputs.size(), Layout(num_axes));
  for (int g = 0; g < num_axes; ++g) {
    const std::vector<std::string>& labels = p.split_labels[g];
    auto find_dim = [&](const std::vector<std::string>& tensor_labels) {
      for (size_t d = 0; d < tensor_labels.size(); ++d) {
        if (std::find(labels.begin(), labels.end(), tensor_labels[d]) != labels.end()) {
          return static_cast<int>(d);
        }
      }
      return -1;
    };
    bool reduces = false;
    bool max_reduces = false;
    for (const std::string& l : labels) {
      auto it = sig.kinds.find(l);
      LOOM_RET_CHECK(it != sig.kinds.end()) << "label " << l << " not in signature of "
                                            << ir::DescribeOp(spec, op);
      if (it->second == ir::DimKind::kFixed) {
        return absl::InvalidArgumentError(absl::StrCat(
            ir::DescribeOp(spec, op), ": dim label '", l, "' may not be split"));
      }
      if (it->second == ir::DimKind::kLogSumExpReduction) {
        return absl::InvalidArgumentError(absl::StrCat(
            ir::DescribeOp(spec, op), ": dim label '", l,
            "' is a softmax's axis; its pieces merge in pairs (attention_merge) on one "
            "device, never in a collective across a mesh axis"));
      }
      reduces |= it->second == ir::DimKind::kReduction;
      max_reduces |= it->second == ir::DimKind::kMaxReduction;
    }
    if (reduces && max_reduces) {
      return absl::InvalidArgumentError(absl::StrCat(
          ir::DescribeOp(spec, op), ": cannot split a sum and a max reduction together"));
    }
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      int d = labels.empty() ? -1 : find_dim(sig.inputs[i]);
      const bool additive =
          std::find(sig.additive_inputs.begin(), sig.additive_inputs.end(), static_cast<int>(i)) !=
          sig.additive_inputs.end();
      if (d >= 0) {
        result.inputs[i][g] = {AxisKind::kSharded, d};
      } else if (p.on_partials[g] || (reduces && additive)) {
        result.inputs[i][g] = {AxisKind::kPartial, -1};
      }
    }
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      int d = labels.empty() ? -1 : find_dim(sig.outputs[i]);
      if (d >= 0) {
        result.outputs[i][g] = {AxisKind::kSharded, d};
      } else if (max_reduces) {
        result.outputs[i][g] = {AxisKind::kPartial, -1, ir::ReduceOp::kMax};
      } else if (reduces || p.on_partials[g]) {
        result.outputs[i][g] = {AxisKind::kPartial, -1};
      }
    }
  }
  return result;
}

namespace {

struct Version {
  Layout layout;
  std::vector<ValueId> values;  // by grid position
};

class Materializer {
 public:
  Materializer(const Graph& spec, const PartitionSpec& p) : spec_(spec), p_(p) {}

  absl::StatusOr<Plan> Run();

 private:
  int num_axes() const { return static_cast<int>(p_.grid_axes.size()); }
  int64_t AxisSize(int g) const { return p_.mesh.axes()[p_.grid_axes[g]].size; }
  bool IsFactoredAxis(int g) const {
    return p_.factored && p_.mesh.axes()[p_.grid_axes[g]].name == "dp";
  }
  // Coordinates materialised along axis g (1 for the dp axis of a factored plan).
  int64_t MaterialisedSize(int g) const { return IsFactoredAxis(g) ? 1 : AxisSize(g); }
  int64_t Coord(int pos, int g) const { return coords_[pos][g]; }
  int64_t Device(int pos, int ppc) const;
  std::vector<std::vector<int>> Groups(int g) const;  // positions differing along g

  SubTensor MakeSub(TensorId t, const Layout& layout, int pos, int* dp_dim,
                    bool* dp_share) const;
  ValueId NewValue(int64_t device, SubTensor sub, ir::DType dtype, int mb, int dp_dim,
                   bool dp_share);
  ValueId NewValueLike(TensorId t, const Layout& layout, int pos, int ppc, int mb);
  ir::TaskId EmitTask(OpKind kind, OpId op, AttrMap attrs, int64_t device, OpInfo info,
                   int stage, std::vector<ValueId> inputs, std::vector<ValueId> outputs);
  ir::Collective& EmitCollective(CollectiveKind kind, const std::vector<int>& group, int ppc,
                                 const OpInfo& info, bool spans_dp);

  absl::StatusOr<const Version*> Get(TensorId t, int ppc, const Layout& want,
                                     const OpInfo& info);
  absl::StatusOr<const Version*> Convert(TensorId t, int ppc, const Version& from,
                                         const Layout& want, const OpInfo& info);
  const Version* Find(TensorId t, int ppc, const Layout& layout) const;
  const Version* Register(TensorId t, int ppc, Version v);
  int TensorMicrobatch(TensorId t) const;

  absl::Status EmitOp(const Op& op);
  absl::Status EmitOutputs();
  void Recompute();

  std::string Where(const Op& op) const { return ir::DescribeOp(spec_, op); }

  const Graph& spec_;
  const PartitionSpec& p_;
  Plan plan_;
  std::vector<std::vector<int64_t>> coords_;  // by position
  std::map<std::pair<TensorId, int>, std::deque<Version>> versions_;  // deque: stable addresses
  std::vector<ir::PlanStep> created_;  // creation order of tasks and collectives
  int microbatches_ = 1;
};

int64_t Materializer::Device(int pos, int ppc) const {
  std::vector<int64_t> c(p_.mesh.axes().size(), 0);
  for (int g = 0; g < num_axes(); ++g) c[p_.grid_axes[g]] = coords_[pos][g];
  if (p_.pp_axis >= 0) c[p_.pp_axis] = ppc;
  return p_.mesh.Device(c);
}

std::vector<std::vector<int>> Materializer::Groups(int g) const {
  std::map<std::vector<int64_t>, std::vector<int>> groups;
  for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
    std::vector<int64_t> key = coords_[pos];
    key[g] = -1;
    groups[key].push_back(pos);  // positions are in coordinate order
  }
  std::vector<std::vector<int>> out;
  for (auto& [key, members] : groups) out.push_back(std::move(members));
  return out;
}

SubTensor Materializer::MakeSub(TensorId t, const Layout& layout, int pos, int* dp_dim,
                                bool* dp_share) const {
  const ir::Tensor& tensor = spec_.tensor(t);
  SubTensor sub;
  sub.tensor = t;
  sub.box = ir::FullBox(tensor.shape);
  sub.part = ValuePart::Full();
  *dp_dim = -1;
  *dp_share = false;
  for (int g : p_.nest_order) {
    const AxisLayout& a = layout[g];
    const int64_t n = AxisSize(g);
    if (IsFactoredAxis(g)) {
      // Replica 0's piece; the replication rule says how the others differ.
      if (a.kind == AxisKind::kSharded) {
        ir::Interval& iv = sub.box[a.dim];
        iv.end = iv.begin + iv.size() / n;
        *dp_dim = a.dim;
      } else if (a.kind == AxisKind::kPartial) {
        *dp_share = true;
        if (a.reduce == ir::ReduceOp::kMax) sub.combine = ir::ReduceOp::kMax;
      }
      continue;
    }
    const int64_t c = Coord(pos, g);
    if (a.kind == AxisKind::kSharded) {
      ir::Interval& iv = sub.box[a.dim];
      const int64_t len = iv.size() / n;
      iv.begin += c * len;
      iv.end = iv.begin + len;
    } else if (a.kind == AxisKind::kPartial) {
      sub.part = sub.part.Share(c, n);
      if (a.reduce == ir::ReduceOp::kMax) sub.combine = ir::ReduceOp::kMax;
    }
  }
  return sub;
}

ValueId Materializer::NewValue(int64_t device, SubTensor sub, ir::DType dtype, int mb,
                               int dp_dim, bool dp_share) {
  ir::PlanValue v;
  v.id = static_cast<ValueId>(plan_.values.size());
  v.device = device;
  v.sub = std::move(sub);
  v.dtype = dtype;
  v.microbatch = mb;
  v.dp_dim = dp_dim;
  v.dp_share = dp_share;
  plan_.values.push_back(std::move(v));
  return plan_.values.back().id;
}

ValueId Materializer::NewValueLike(TensorId t, const Layout& layout, int pos, int ppc, int mb) {
  int dp_dim;
  bool dp_share;
  SubTensor sub = MakeSub(t, layout, pos, &dp_dim, &dp_share);
  return NewValue(Device(pos, ppc), std::move(sub), spec_.tensor(t).dtype, mb, dp_dim,
                  dp_share);
}

ir::TaskId Materializer::EmitTask(OpKind kind, OpId op, AttrMap attrs, int64_t device, OpInfo info,
                               int stage, std::vector<ValueId> inputs,
                               std::vector<ValueId> outputs) {
  ir::Task task;
  task.id = static_cast<ir::TaskId>(plan_.tasks.size());
  task.op = op;
  task.kind = kind;
  task.attrs = std::move(attrs);
  task.device = device;
  task.info = info;
  task.stage = stage;
  task.inputs = std::move(inputs);
  task.outputs = std::move(outputs);
  created_.push_back({false, task.id});
  plan_.tasks.push_back(std::move(task));
  return plan_.tasks.back().id;
}

ir::Collective& Materializer::EmitCollective(CollectiveKind kind, const std::vector<int>& group,
                                             int ppc, const OpInfo& info, bool spans_dp) {
  ir::Collective c;
  c.id = static_cast<ir::CollectiveId>(plan_.collectives.size());
  c.kind = kind;
  for (int pos : group) c.devices.push_back(Device(pos, ppc));
  c.microbatch = info.microbatch;
  c.phase = info.phase;
  c.layer = info.layer;
  c.spans_dp = spans_dp;
  created_.push_back({true, c.id});
  plan_.collectives.push_back(std::move(c));
  return plan_.collectives.back();
}

const Version* Materializer::Find(TensorId t, int ppc, const Layout& layout) const {
  auto it = versions_.find({t, ppc});
  if (it == versions_.end()) return nullptr;
  for (const Version& v : it->second) {
    if (v.layout == layout) return &v;
  }
  return nullptr;
}

const Version* Materializer::Register(TensorId t, int ppc, Version v) {
  auto& list = versions_[{t, ppc}];
  list.push_back(std::move(v));
  return &list.back();
}

int Materializer::TensorMicrobatch(TensorId t) const {
  const ir::Tensor& tensor = spec_.tensor(t);
  if (tensor.producer != ir::kNoId) return spec_.op(tensor.producer).info.microbatch;
  if (tensor.role != ir::TensorRole::kInput) return -1;  // parameters, states
  for (OpId c : spec_.consumers(t)) return spec_.op(c).info.microbatch;
  return -1;
}

absl::StatusOr<const Version*> Materializer::Get(TensorId t, int ppc, const Layout& want,
                                                 const OpInfo& consumer) {
  if (const Version* v = Find(t, ppc, want)) return v;
  // Conversions belong to the tensor's micro-batch (a parameter gathered once serves
  // every micro-batch), and to the consumer's phase and layer.
  OpInfo info = consumer;
  info.microbatch = TensorMicrobatch(t);
  auto here = versions_.find({t, ppc});
  if (here != versions_.end() && !here->second.empty()) {
    Version from = here->second.front();  // the produced version
    return Convert(t, ppc, from, want, info);
  }
  const ir::Tensor& tensor = spec_.tensor(t);
  if (tensor.producer == ir::kNoId) {
    // A plan input: parameter, optimizer state or data shard.
    Layout home = want;
    if (t < static_cast<TensorId>(p_.input_layouts.size()) && !p_.input_layouts[t].empty()) {
      home = p_.input_layouts[t];
    }
    for (const AxisLayout& a : home) {
      if (a.kind == AxisKind::kPartial) home = want;  // inputs are never partial
    }
    for (AxisLayout& a : home) {
      if (a.kind == AxisKind::kPartial) a = AxisLayout{};
    }
    Version v;
    v.layout = home;
    const int mb = info.microbatch;
    for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
      v.values.push_back(NewValueLike(t, home, pos, ppc, mb));
    }
    const Version* made = Register(t, ppc, std::move(v));
    if (made->layout == want) return made;
    Version from = *made;
    return Convert(t, ppc, from, want, info);
  }
  // Produced on another pipeline stage. Sent as produced and brought into `want`
  // here when no step on the way shrinks what each device holds (a partial sum is
  // reduced by the stage that reads it, as within a stage); otherwise brought into
  // `want` there first, so that less is sent (a slice, a reduce-scatter).
  int source = -1;
  for (const auto& [key, list] : versions_) {
    if (key.first == t && !list.empty()) {
      source = key.second;
      break;
    }
  }
  if (source < 0) {
    return absl::InternalError(absl::StrCat("tensor '", tensor.name, "' used before produced"));
  }
  const Version* at_source = &versions_.at({t, source}).front();
  bool shrinks = false;
  for (size_t g = 0; g < want.size() && g < at_source->layout.size(); ++g) {
    shrinks |= want[g].kind == AxisKind::kSharded && at_source->layout[g].kind != AxisKind::kSharded;
  }
  if (shrinks) {
    LOOM_ASSIGN_OR_RETURN(at_source, Get(t, source, want, info));
  }
  Version moved;
  moved.layout = at_source->layout;
  std::vector<ValueId> src_values = at_source->values;
  for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
    const ir::PlanValue src = plan_.values[src_values[pos]];
    ValueId out = NewValue(Device(pos, ppc), src.sub, src.dtype, src.microbatch, src.dp_dim,
                           src.dp_share);
    ir::Collective& c = EmitCollective(CollectiveKind::kSendRecv, {pos}, source, info, false);
    c.devices = {src.device, Device(pos, ppc)};
    c.inputs = {src_values[pos]};
    c.outputs = {out};
    moved.values.push_back(out);
  }
  const Version* arrived = Register(t, ppc, std::move(moved));
  if (arrived->layout == want) return arrived;
  const Version from = *arrived;
  return Convert(t, ppc, from, want, info);
}

absl::StatusOr<const Version*> Materializer::Convert(TensorId t, int ppc, const Version& from,
                                                     const Layout& want, const OpInfo& info) {
  const ir::Tensor& tensor = spec_.tensor(t);
  LOOM_ASSIGN_OR_RETURN(std::vector<ConversionStep> path,
                        CheapestConversion(tensor.type(), from.layout, want, p_));
  Version cur = from;
  for (const ConversionStep& s : path) {
    const int g = s.axis;
    Version out;
    out.layout = cur.layout;
    out.layout[g] = s.to;
    switch (s.kind) {
      case ConversionKind::kCollective: {
        out.values.assign(coords_.size(), ir::kNoId);
        for (const std::vector<int>& group : Groups(g)) {
          ir::Collective& c = EmitCollective(s.collective, group, ppc, info, IsFactoredAxis(g));
          c.dim = s.dim;
          c.dim2 = s.dim2;
          c.reduce = s.reduce;
          const ir::CollectiveId cid = c.id;
          for (int pos : group) {
            ValueId v = NewValueLike(t, out.layout, pos, ppc, info.microbatch);
            plan_.collectives[cid].inputs.push_back(cur.values[pos]);
            plan_.collectives[cid].outputs.push_back(v);
            out.values[pos] = v;
          }
        }
        break;
      }
      case ConversionKind::kSlice: {
        // Each device keeps its chunk of a replicated value.
        const int d = s.to.dim;
        for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
          const ir::PlanValue in = plan_.values[cur.values[pos]];
          ValueId v = NewValueLike(t, out.layout, pos, ppc, info.microbatch);
          const ir::Interval& iv = plan_.values[v].sub.box[d];
          AttrMap attrs{{"dim", int64_t{d}},
                        {"begin", iv.begin - in.sub.box[d].begin},
                        {"end", iv.end - in.sub.box[d].begin}};
          ir::TaskId task = EmitTask(OpKind::kSlice, ir::kNoId, std::move(attrs), in.device,
                                     info, -1, {cur.values[pos]}, {v});
          if (IsFactoredAxis(g)) {
            // Replica r keeps rows r * len onwards.
            const int64_t len = iv.size();
            plan_.tasks[task].dp_attr_steps = {{"begin", len}, {"end", len}};
          }
          out.values.push_back(v);
        }
        break;
      }
      case ConversionKind::kZeroSplit: {
        // The first device of the axis keeps the value, the others hold zeros:
        // exact, never a division.
        if (IsFactoredAxis(g)) {
          return absl::InternalError(absl::StrCat(
              "tensor '", tensor.name, "': a factored plan cannot zero-split over dp"));
        }
        for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
          if (Coord(pos, g) == 0) {
            out.values.push_back(cur.values[pos]);
            continue;
          }
          const ir::PlanValue in = plan_.values[cur.values[pos]];
          SubTensor sub = in.sub;
          sub.part = ValuePart::Empty();
          ValueId v = NewValue(in.device, sub, in.dtype, info.microbatch, in.dp_dim, false);
          AttrMap attrs{{"shape", ir::BoxDims(sub.box)},
                        {"value", 0.0},
                        {"dtype", std::string(ir::DTypeName(in.dtype))}};
          EmitTask(OpKind::kFill, ir::kNoId, std::move(attrs), in.device, info, -1, {}, {v});
          out.values.push_back(v);
        }
        break;
      }
    }
    cur = *Register(t, ppc, std::move(out));
  }
  if (cur.layout != want) {
    return absl::InternalError(absl::StrCat("tensor '", tensor.name, "': cannot convert ",
                                            LayoutToString(from.layout), " to ",
                                            LayoutToString(want)));
  }
  return Find(t, ppc, want);
}

absl::Status Materializer::EmitOp(const Op& op) {
  const OpPartition& part = p_.ops[op.id];
  LOOM_ASSIGN_OR_RETURN(OpLayouts layouts, LayoutsOf(spec_, op, p_));
  // In a factored plan an op outside the micro-batches reads only micro-batch 0's
  // copy of a per-micro-batch input; expansion restores the others.
  std::vector<int> used_inputs;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (p_.factored && op.info.microbatch < 0 && TensorMicrobatch(op.inputs[i]) >= 1) {
      continue;
    }
    used_inputs.push_back(static_cast<int>(i));
  }
  std::vector<TensorType> in_types, out_types;
  for (TensorId t : op.inputs) in_types.push_back(spec_.tensor(t).type());
  for (TensorId t : op.outputs) out_types.push_back(spec_.tensor(t).type());
  const ir::OpSchema& schema = ir::GetOpSchema(op.kind);
  for (int stage : part.stages) {
    const int ppc = p_.pp_axis >= 0 ? stage % static_cast<int>(p_.mesh.axes()[p_.pp_axis].size)
                                    : 0;
    std::vector<const Version*> inputs;
    for (int i : used_inputs) {
      LOOM_ASSIGN_OR_RETURN(const Version* v,
                            Get(op.inputs[i], ppc, layouts.inputs[i], op.info));
      inputs.push_back(v);
    }
    std::vector<Version> outs(op.outputs.size());
    for (size_t o = 0; o < op.outputs.size(); ++o) outs[o].layout = layouts.outputs[o];
    for (int pos = 0; pos < static_cast<int>(coords_.size()); ++pos) {
      std::vector<ValueId> in_ids;
      std::vector<Box> in_boxes(op.inputs.size());
      for (size_t k = 0; k < used_inputs.size(); ++k) {
        in_ids.push_back(inputs[k]->values[pos]);
        in_boxes[used_inputs[k]] = plan_.values[in_ids.back()].sub.box;
      }
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        if (in_boxes[i].empty() && in_types[i].shape.rank() > 0) {
          int dd;
          bool ds;
          in_boxes[i] = MakeSub(op.inputs[i], layouts.inputs[i], pos, &dd, &ds).box;
        }
      }
      std::vector<ValueId> out_ids;
      std::vector<Box> out_boxes;
      for (size_t o = 0; o < op.outputs.size(); ++o) {
        ValueId v = NewValueLike(op.outputs[o], layouts.outputs[o], pos, ppc, op.info.microbatch);
        out_ids.push_back(v);
        out_boxes.push_back(plan_.values[v].sub.box);
        outs[o].values.push_back(v);
      }
      AttrMap attrs = op.attrs;
      if (schema.shard_attrs != nullptr) {
        auto sharded = schema.shard_attrs(op.attrs, in_types, in_boxes, out_types, out_boxes);
        if (!sharded.ok()) {
          return absl::Status(sharded.status().code(),
                              absl::StrCat(Where(op), ": ", sharded.status().message()));
        }
        attrs = *std::move(sharded);
      }
      ir::TaskId id = EmitTask(op.kind, op.id, std::move(attrs), Device(pos, ppc), op.info,
                               stage, std::move(in_ids), std::move(out_ids));
      plan_.tasks[id].recompute = false;
    }
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      Register(op.outputs[o], ppc, std::move(outs[o]));
    }
  }
  return absl::OkStatus();
}

absl::Status Materializer::EmitOutputs() {
  for (TensorId t : spec_.outputs()) {
    std::vector<int> coords_with;
    for (auto it = versions_.lower_bound({t, std::numeric_limits<int>::min()});
         it != versions_.end() && it->first.first == t; ++it) {
      if (!it->second.empty()) coords_with.push_back(it->first.second);
    }
    if (coords_with.empty()) {
      return absl::InternalError(absl::StrCat("output '", spec_.tensor(t).name,
                                              "' was never produced"));
    }
    for (int ppc : coords_with) {
      const Version& produced = versions_.at({t, ppc}).front();
      Layout want = produced.layout;
      if (t < static_cast<TensorId>(p_.output_layouts.size()) && !p_.output_layouts[t].empty()) {
        want = p_.output_layouts[t];
      }
      for (AxisLayout& a : want) {
        if (a.kind == AxisKind::kPartial) a = AxisLayout{};
      }
      OpInfo info = spec_.op(spec_.tensor(t).producer).info;
      LOOM_ASSIGN_OR_RETURN(const Version* v, Get(t, ppc, want, info));
      for (ValueId id : v->values) plan_.outputs.push_back(id);
    }
  }
  return absl::OkStatus();
}

// Re-runs the forward pieces of each recomputed layer before the backward pieces of
// the same layer and micro-batch: clones of the forward tasks and collectives,
// whose outputs the backward pieces read instead of the stored activations.
void Materializer::Recompute() {
  // (layer, micro-batch) -> value remapping to the clones.
  std::map<std::pair<int, int>, absl::flat_hash_map<ValueId, ValueId>> remap;
  auto wants = [&](int layer) {
    for (const Op& op : spec_.ops()) {
      if (op.info.layer == layer && op.info.phase == ir::Phase::kForward &&
          p_.ops[op.id].recompute) {
        return true;
      }
    }
    return false;
  };
  absl::flat_hash_map<int, bool> layer_wanted;
  const std::vector<ir::PlanStep> steps = created_;
  // Clone forward items in creation order.
  for (const ir::PlanStep& s : steps) {
    OpInfo info;
    if (s.is_collective) {
      const ir::Collective& c = plan_.collectives[s.id];
      info = OpInfo{c.phase, c.layer, c.microbatch};
    } else {
      info = plan_.tasks[s.id].info;
    }
    if (info.phase != ir::Phase::kForward || info.layer < 0) continue;
    auto lw = layer_wanted.find(info.layer);
    if (lw == layer_wanted.end()) lw = layer_wanted.emplace(info.layer, wants(info.layer)).first;
    if (!lw->second) continue;
    auto& map = remap[{info.layer, info.microbatch}];
    auto mapped = [&](ValueId v) {
      auto it = map.find(v);
      return it == map.end() ? v : it->second;
    };
    auto clone_value = [&](ValueId v) {
      ir::PlanValue copy = plan_.values[v];
      copy.id = static_cast<ValueId>(plan_.values.size());
      plan_.values.push_back(copy);
      map[v] = copy.id;
      return copy.id;
    };
    if (s.is_collective) {
      ir::Collective c = plan_.collectives[s.id];
      c.id = static_cast<ir::CollectiveId>(plan_.collectives.size());
      c.recompute = true;
      for (ValueId& v : c.inputs) v = mapped(v);
      for (ValueId& v : c.outputs) v = clone_value(v);
      plan_.collectives.push_back(std::move(c));
    } else {
      ir::Task t = plan_.tasks[s.id];
      t.id = static_cast<ir::TaskId>(plan_.tasks.size());
      t.recompute = true;
      for (ValueId& v : t.inputs) v = mapped(v);
      for (ValueId& v : t.outputs) v = clone_value(v);
      plan_.tasks.push_back(std::move(t));
    }
  }
  // Backward items of the layer read the clones.
  for (ir::Task& t : plan_.tasks) {
    if (t.info.phase != ir::Phase::kBackward) continue;
    auto it = remap.find({t.info.layer, t.info.microbatch});
    if (it == remap.end()) continue;
    for (ValueId& v : t.inputs) {
      auto m = it->second.find(v);
      if (m != it->second.end()) v = m->second;
    }
  }
  for (ir::Collective& c : plan_.collectives) {
    if (c.phase != ir::Phase::kBackward) continue;
    auto it = remap.find({c.layer, c.microbatch});
    if (it == remap.end()) continue;
    for (ValueId& v : c.inputs) {
      auto m = it->second.find(v);
      if (m != it->second.end()) v = m->second;
    }
  }
}

absl::StatusOr<Plan> Materializer::Run() {
  LOOM_RET_CHECK(static_cast<int>(p_.ops.size()) == spec_.num_ops());
  plan_.model = spec_.name();
  plan_.mesh = p_.mesh;
  // Grid positions in row-major coordinate order.
  coords_.push_back(std::vector<int64_t>(num_axes(), 0));
  for (int g = num_axes() - 1; g >= 0; --g) {
    std::vector<std::vector<int64_t>> next;
    for (int64_t c = 0; c < MaterialisedSize(g); ++c) {
      for (const auto& base : coords_) {
        auto v = base;
        v[g] = c;
        next.push_back(v);
      }
    }
    coords_ = std::move(next);
  }
  std::sort(coords_.begin(), coords_.end());
  LOOM_ASSIGN_OR_RETURN(ir::MicrobatchMap mbmap, ir::MicrobatchMap::Build(spec_));
  microbatches_ = mbmap.microbatches();
  for (const Op& op : spec_.ops()) {
    if (p_.factored && op.info.microbatch >= 1) continue;
    LOOM_RETURN_IF_ERROR(EmitOp(op));
  }
  LOOM_RETURN_IF_ERROR(EmitOutputs());
  Recompute();
  if (p_.factored) {
    ir::Factoring f;
    for (int g = 0; g < num_axes(); ++g) {
      if (IsFactoredAxis(g)) f.dp = AxisSize(g);
    }
    const int dp_axis = p_.mesh.AxisIndex("dp");
    f.dp_device_stride = p_.mesh.num_devices() / std::max<int64_t>(1, f.dp);
    if (dp_axis != 0) f.dp_device_stride = 0;  // dp must be the outermost axis to factor
    f.microbatches = microbatches_;
    plan_.factoring = f;
  }
  return std::move(plan_);
}

}  // namespace

absl::StatusOr<Plan> Materialize(const Graph& spec, const PartitionSpec& partition) {
  Materializer m(spec, partition);
  return m.Run();
}

}  // namespace loom::transform
