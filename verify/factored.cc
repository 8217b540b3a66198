#include "verify/factored.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::verify {

MicrobatchSymmetry::MicrobatchSymmetry(const ir::Graph& spec, const ir::MicrobatchMap& map)
    : spec_(spec), map_(map) {
  // Kinds, attributes and operand counts of the copies are alike already
  // (MicrobatchMap::Build refuses a spec where they are not). What is left is
  // that copy m reads the micro-batch-m images of copy 0's inputs, and that the
  // data inputs among them have copy 0's types. The types of everything an op
  // computes then agree by induction in op order: an op's output types are
  // inferred from its kind, attributes and input types when it is added to the
  // graph (ir::Graph::AddOp), and never change after.
  input_begin_.push_back(0);
  for (ir::OpId op0 = 0; op0 < spec.num_ops(); ++op0) {
    const ir::Op& a = spec.op(op0);
    if (a.info.microbatch != 0) continue;
    for (const ir::TensorId x : a.inputs) {
      const int mb = map.TensorMicrobatch(x);
      if (mb != -1 && mb != 0) {
        status_ = absl::FailedPreconditionError(absl::StrCat(
            "op '", spec.tensor(a.outputs.empty() ? x : a.outputs[0]).name,
            "' of micro-batch 0 reads '", spec.tensor(x).name, "' of micro-batch ", mb));
        return;
      }
      data_input_.push_back(mb == 0 && spec.tensor(x).producer == ir::kNoId);
    }
    ops0_.push_back(op0);
    input_begin_.push_back(static_cast<int64_t>(data_input_.size()));
  }
}

absl::Status MicrobatchSymmetry::CheckCopy(int m) const {
  LOOM_RETURN_IF_ERROR(status_);
  for (size_t k = 0; k < ops0_.size(); ++k) {
    const ir::OpId op0 = ops0_[k];
    const ir::OpId opm = map_.Op(op0, m);
    if (opm == ir::kNoId) return absl::FailedPreconditionError("micro-batch map incomplete");
    const ir::Op& a = spec_.op(op0);
    const ir::Op& b = spec_.op(opm);
    bool same = a.inputs.size() == b.inputs.size() && a.outputs.size() == b.outputs.size();
    for (size_t i = 0; same && i < a.inputs.size(); ++i) {
      same = b.inputs[i] == map_.Tensor(a.inputs[i], m);
      if (!same || !data_input_[input_begin_[k] + i]) continue;
      const ir::Tensor& x = spec_.tensor(a.inputs[i]);
      const ir::Tensor& y = spec_.tensor(b.inputs[i]);
      same = x.dtype == y.dtype && x.shape.SameDims(y.shape);
    }
    if (!same) {
      return absl::FailedPreconditionError(absl::StrCat(
          "op ", opm, " of micro-batch ", m, " is not a copy of op ", op0, " of micro-batch 0"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMicrobatchSymmetry(const ir::Graph& spec, const ir::MicrobatchMap& map) {
  const MicrobatchSymmetry symmetry(spec, map);
  LOOM_RETURN_IF_ERROR(symmetry.status());
  for (int m = 1; m < map.microbatches(); ++m) LOOM_RETURN_IF_ERROR(symmetry.CheckCopy(m));
  return absl::OkStatus();
}

namespace {

class Slicer {
 public:
  Slicer(const ir::Graph& spec, const ir::Plan& unit, ir::MicrobatchMap mbmap,
         const SliceOptions& options)
      : spec_(spec), unit_(unit), f_(*unit.factoring), options_(options) {
    out_.mbmap = std::move(mbmap);
    out_.dp = f_.dp;
    out_.microbatches = f_.microbatches;
    for (int64_t r : {int64_t{0}, int64_t{1}, f_.dp - 1}) {
      if (r >= 0 && r < f_.dp && std::find(replicas_.begin(), replicas_.end(), r) == replicas_.end()) {
        replicas_.push_back(r);
      }
    }
  }

  SlicedPlan Run();

 private:
  bool Tagged(ir::ValueId v) const { return unit_.values[v].microbatch == 0; }
  int Slot(int64_t r) const {
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (replicas_[i] == r) return static_cast<int>(i);
    }
    return -1;
  }
  int64_t Key(ir::ValueId v, int64_t r, int m) const {
    return (static_cast<int64_t>(v) * f_.dp + r) * f_.microbatches + m;
  }
  ir::ValueId NewValue(ir::ValueId v, int64_t r, int m) {
    ir::PlanValue e = ir::ExpandedValue(unit_, out_.mbmap, unit_.values[v], r, m);
    e.id = static_cast<ir::ValueId>(out_.plan.values.size());
    out_.plan.values.push_back(std::move(e));
    out_.origin.push_back({v, r, m});
    return out_.plan.values.back().id;
  }
  static bool Skip(const std::vector<char>* mask, int64_t i) {
    return mask != nullptr && (*mask)[i] != 0;
  }
  // The slice's value for copy (r, m) of unit value v, a phantom when no item
  // of the slice computes it.
  ir::ValueId Resolve(ir::ValueId v, int64_t r, int m);
  void AddTasks();
  void AddCollectives();

  const ir::Graph& spec_;
  const ir::Plan& unit_;
  const ir::Factoring& f_;
  const SliceOptions& options_;
  std::vector<int64_t> replicas_;          // derived replicas
  std::vector<std::vector<ir::ValueId>> real_;  // [slot][v]: micro-batch 0 copy
  absl::flat_hash_map<int64_t, ir::ValueId> other_;  // every other copy made so far
  SlicedPlan out_;
};

ir::ValueId Slicer::Resolve(ir::ValueId v, int64_t r, int m) {
  if (!Tagged(v)) m = 0;
  const int slot = Slot(r);
  if (slot >= 0 && m == 0) {
    ir::ValueId& id = real_[slot][v];
    if (id == ir::kNoId) id = NewValue(v, r, 0);
    return id;
  }
  auto it = other_.find(Key(v, r, m));
  if (it != other_.end()) return it->second;
  Phantom p;
  if (slot >= 0) {
    p.src0 = Resolve(v, r, 0);
    p.microbatch = m;
  } else {
    p.src0 = Resolve(v, 0, m);
    p.src1 = Resolve(v, 1, m);
    p.replica = r;
  }
  p.value = NewValue(v, r, m);
  other_.emplace(Key(v, r, m), p.value);
  out_.phantoms.push_back(p);
  return p.value;
}

void Slicer::AddTasks() {
  for (int64_t r : replicas_) {
    for (size_t t = 0; t < unit_.tasks.size(); ++t) {
      if (Skip(options_.skip_tasks, static_cast<int64_t>(t))) continue;  // ids are dense
      const ir::Task& task = unit_.tasks[t];
      ir::Task e = task;
      e.id = static_cast<ir::TaskId>(out_.plan.tasks.size());
      e.device = task.device + r * f_.dp_device_stride;
      e.attrs = ir::ExpandedAttrs(task, r);
      e.dp_attr_steps.clear();
      e.inputs.clear();
      e.outputs.clear();
      const bool tagged = task.info.microbatch == 0;
      for (ir::ValueId v : task.inputs) {
        if (tagged || !Tagged(v)) {
          e.inputs.push_back(Resolve(v, r, 0));
        } else {
          for (int k = 0; k < f_.microbatches; ++k) e.inputs.push_back(Resolve(v, r, k));
        }
      }
      for (ir::ValueId v : task.outputs) e.outputs.push_back(Resolve(v, r, 0));
      out_.plan.tasks.push_back(std::move(e));
    }
  }
}

void Slicer::AddCollectives() {
  for (int64_t r : replicas_) {
    for (size_t k = 0; k < unit_.collectives.size(); ++k) {
      if (Skip(options_.skip_collectives, static_cast<int64_t>(k))) continue;  // ids are dense
      const ir::Collective& c = unit_.collectives[k];
      if (c.spans_dp && r > 0) continue;
      ir::Collective e = c;
      e.id = static_cast<ir::CollectiveId>(out_.plan.collectives.size());
      e.spans_dp = false;
      e.devices.clear();
      e.inputs.clear();
      e.outputs.clear();
      int64_t elided = 0;
      if (c.spans_dp && options_.compress_replicas && f_.dp > 3 &&
          c.kind == ir::CollectiveKind::kAllReduce && c.reduce == ir::ReduceOp::kSum) {
        // The derived replicas' members only; the others are summed in closed form.
        elided = f_.dp;
        for (size_t i = 0; i < c.devices.size(); ++i) {
          for (int64_t rr : replicas_) {
            e.devices.push_back(c.devices[i] + rr * f_.dp_device_stride);
            e.inputs.push_back(Resolve(c.inputs[i], rr, 0));
            e.outputs.push_back(Resolve(c.outputs[i], rr, 0));
          }
        }
      } else if (!c.spans_dp) {
        for (int64_t d : c.devices) e.devices.push_back(d + r * f_.dp_device_stride);
        for (ir::ValueId v : c.inputs) e.inputs.push_back(Resolve(v, r, 0));
        for (ir::ValueId v : c.outputs) e.outputs.push_back(Resolve(v, r, 0));
      } else {
        // Unit rank i becomes the dp ranks i * dp + rr, as in the explicit plan.
        for (int64_t d : c.devices) {
          for (int64_t rr = 0; rr < f_.dp; ++rr) e.devices.push_back(d + rr * f_.dp_device_stride);
        }
        if (c.kind == ir::CollectiveKind::kBroadcast) {
          e.inputs.push_back(Resolve(c.inputs[0], 0, 0));
        } else {
          for (ir::ValueId v : c.inputs) {
            for (int64_t rr = 0; rr < f_.dp; ++rr) e.inputs.push_back(Resolve(v, rr, 0));
          }
        }
        for (ir::ValueId v : c.outputs) {
          for (int64_t rr = 0; rr < f_.dp; ++rr) {
            if (Slot(rr) >= 0) {
              e.outputs.push_back(Resolve(v, rr, 0));
            } else {
              // Computed here, in a replica the slice does not otherwise derive.
              const ir::ValueId id = NewValue(v, rr, 0);
              other_.emplace(Key(v, rr, 0), id);
              e.outputs.push_back(id);
            }
          }
        }
      }
      out_.plan.collectives.push_back(std::move(e));
      out_.elided.push_back(elided);
    }
  }
}

SlicedPlan Slicer::Run() {
  out_.plan.model = unit_.model;
  out_.plan.mesh = unit_.mesh;
  const ir::ValueId nv = static_cast<ir::ValueId>(unit_.values.size());
  // A slice that leaves items out makes values as its items and outputs reach
  // them; a whole one makes every value first, replica by replica.
  real_.assign(replicas_.size(), std::vector<ir::ValueId>(nv, ir::kNoId));
  if (options_.skip_tasks == nullptr && options_.skip_collectives == nullptr) {
    for (size_t s = 0; s < replicas_.size(); ++s) {
      for (ir::ValueId v = 0; v < nv; ++v) real_[s][v] = NewValue(v, replicas_[s], 0);
    }
  }
  {
    // Room for the slice's items and values (growing by doubling would copy every
    // value a few times over): a value per operand of an item at most, and the
    // copies of every other micro-batch an item outside them reads.
    size_t tasks = 0, collectives = 0, values = 0;
    for (size_t t = 0; t < unit_.tasks.size(); ++t) {
      if (Skip(options_.skip_tasks, static_cast<int64_t>(t))) continue;
      const ir::Task& task = unit_.tasks[t];
      ++tasks;
      values += task.outputs.size();
      for (ir::ValueId v : task.inputs) {
        values += task.info.microbatch != 0 && Tagged(v) ? f_.microbatches : 1;
      }
    }
    for (size_t c = 0; c < unit_.collectives.size(); ++c) {
      if (Skip(options_.skip_collectives, static_cast<int64_t>(c))) continue;
      ++collectives;
      values += unit_.collectives[c].outputs.size();
    }
    out_.plan.tasks.reserve(tasks * replicas_.size());
    out_.plan.collectives.reserve(collectives * replicas_.size());
    out_.elided.reserve(collectives * replicas_.size());
    out_.plan.values.reserve(out_.plan.values.size() + values * replicas_.size());
    out_.origin.reserve(out_.plan.values.capacity());
  }
  AddTasks();
  AddCollectives();
  for (ir::ValueId v : unit_.outputs) {
    if (Skip(options_.skip_outputs, v)) continue;
    const ir::PlanValue& u = unit_.values[v];
    const bool per_replica = u.dp_dim >= 0 || u.dp_share;
    if (!per_replica && replicas_.size() == 3) {
      out_.same_in_every_replica.push_back({Resolve(v, 0, 0), Resolve(v, 1, 0)});
    }
    for (int64_t r = 0; r < f_.dp; ++r) {
      if (!per_replica && Slot(r) < 0) continue;
      for (int m = 0; m < (Tagged(v) ? f_.microbatches : 1); ++m) {
        out_.plan.outputs.push_back(Resolve(v, r, m));
      }
    }
  }
  if (replicas_.size() == 3) {
    for (ir::ValueId v = 0; v < nv; ++v) {
      if (real_[0][v] == ir::kNoId || real_[1][v] == ir::kNoId || real_[2][v] == ir::kNoId) {
        continue;
      }
      out_.replica_checks.push_back({real_[0][v], real_[1][v], real_[2][v]});
    }
  }
  out_.replicas = replicas_;
  out_.real = std::move(real_);
  return std::move(out_);
}

}  // namespace

absl::StatusOr<std::optional<SlicedPlan>> SliceFactoredPlan(const ir::Graph& spec,
                                                            const ir::Plan& plan,
                                                            const SliceOptions& options) {
  if (!plan.is_factored()) return absl::InvalidArgumentError("the plan is not factored");
  auto mbmap = ir::MicrobatchMap::Build(spec);
  if (!mbmap.ok()) {
    return absl::Status(mbmap.status().code(),
                        absl::StrCat("plan: spec: ", mbmap.status().message()));
  }
  LOOM_RETURN_IF_ERROR(ir::ValidateFactoring(plan, *mbmap));
  if (!CheckMicrobatchSymmetry(spec, *mbmap).ok()) return std::optional<SlicedPlan>();
  return std::optional<SlicedPlan>(Slicer(spec, plan, *std::move(mbmap), options).Run());
}

SlicedPlan SliceFactoredPlan(const ir::Graph& spec, const ir::Plan& plan,
                             ir::MicrobatchMap mbmap, const SliceOptions& options) {
  return Slicer(spec, plan, std::move(mbmap), options).Run();
}

}  // namespace loom::verify
