// The partition primitives: split, stage, replicate, recompute.

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "transform/partition.h"

namespace loom::transform {

PartitionSpec UnsplitPartition(const ir::Graph& spec, int64_t dp, int64_t pp, int64_t tp) {
  PartitionSpec p;
  p.mesh = ir::Mesh({{"dp", dp}, {"pp", pp}, {"tp", tp}});
  p.grid_axes = {0, 2};
  p.pp_axis = 1;
  p.nest_order = {1, 0};
  p.num_virtual_stages = static_cast<int>(pp);
  p.ops.assign(spec.num_ops(), OpPartition{});
  for (OpPartition& op : p.ops) {
    op.stages = {0};
    op.split_labels.assign(2, {});
    op.on_partials.assign(2, false);
  }
  return p;
}

absl::Status Split(const ir::Graph& spec, PartitionSpec& partition, ir::OpId op_id,
                   const std::string& label, const std::string& axis) {
  if (op_id < 0 || op_id >= spec.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("split: no op ", op_id));
  }
  const ir::Op& op = spec.op(op_id);
  int g = -1;
  for (size_t i = 0; i < partition.grid_axes.size(); ++i) {
    if (partition.mesh.axes()[partition.grid_axes[i]].name == axis) g = static_cast<int>(i);
  }
  if (g < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("split: ", ir::DescribeOp(spec, op), ": no grid axis '", axis, "'"));
  }
  std::vector<ir::TensorType> in, out;
  for (ir::TensorId t : op.inputs) in.push_back(spec.tensor(t).type());
  for (ir::TensorId t : op.outputs) out.push_back(spec.tensor(t).type());
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig, ir::GetOpSchema(op.kind).signature(in, op.attrs));
  auto kind = sig.kinds.find(label);
  if (kind == sig.kinds.end()) {
    return absl::InvalidArgumentError(absl::StrCat("split: ", ir::DescribeOp(spec, op),
                                                   " has no dim label '", label, "' (",
                                                   sig.ToString(), ")"));
  }
  std::vector<std::string> labels = {label};
  for (const auto& group : sig.coupled) {
    if (std::find(group.begin(), group.end(), label) != group.end()) labels = group;
  }
  const int64_t n = partition.mesh.axes()[partition.grid_axes[g]].size;
  auto check = [&](const std::vector<std::vector<std::string>>& side,
                   const std::vector<ir::TensorType>& types) -> absl::Status {
    for (size_t i = 0; i < side.size(); ++i) {
      for (size_t d = 0; d < side[i].size(); ++d) {
        if (std::find(labels.begin(), labels.end(), side[i][d]) == labels.end()) continue;
        if (sig.kinds.at(side[i][d]) == ir::DimKind::kFixed) {
          return absl::InvalidArgumentError(absl::StrCat(
              "split: ", ir::DescribeOp(spec, op), ": dim label '", side[i][d],
              "' may not be split"));
        }
        const int64_t size = types[i].shape.dim(static_cast<int>(d));
        if (size % n != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "split: ", ir::DescribeOp(spec, op), ": axis '", axis, "' of size ", n,
              " does not divide dim ", d, " (", size, ") labelled '", side[i][d], "'"));
        }
      }
    }
    return absl::OkStatus();
  };
  LOOM_RETURN_IF_ERROR(check(sig.inputs, in));
  LOOM_RETURN_IF_ERROR(check(sig.outputs, out));
  partition.ops[op_id].split_labels[g] = labels;
  return absl::OkStatus();
}

absl::Status Stage(PartitionSpec& partition, absl::Span<const ir::OpId> ops, int stage) {
  if (stage < 0 || stage >= partition.num_virtual_stages) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " is outside [0, ",
                                                   partition.num_virtual_stages, ")"));
  }
  for (ir::OpId op : ops) {
    if (op < 0 || op >= static_cast<ir::OpId>(partition.ops.size())) {
      return absl::InvalidArgumentError(absl::StrCat("stage: no op ", op));
    }
    partition.ops[op].stages = {stage};
  }
  return absl::OkStatus();
}

absl::Status Replicate(PartitionSpec& partition, ir::OpId op, std::vector<int> stages) {
  if (op < 0 || op >= static_cast<ir::OpId>(partition.ops.size())) {
    return absl::InvalidArgumentError(absl::StrCat("replicate: no op ", op));
  }
  if (stages.empty()) return absl::InvalidArgumentError("replicate: no stage given");
  for (int s : stages) {
    if (s < 0 || s >= partition.num_virtual_stages) {
      return absl::InvalidArgumentError(absl::StrCat("replicate: stage ", s, " is outside [0, ",
                                                     partition.num_virtual_stages, ")"));
    }
  }
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  partition.ops[op].stages = std::move(stages);
  return absl::OkStatus();
}

absl::Status Recompute(const ir::Graph& spec, PartitionSpec& partition,
                       absl::Span<const ir::OpId> ops) {
  for (ir::OpId op : ops) {
    if (op < 0 || op >= spec.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("recompute: no op ", op));
    }
    const ir::Op& o = spec.op(op);
    if (o.info.phase != ir::Phase::kForward || o.info.layer < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recompute: ", ir::DescribeOp(spec, o), " is not a forward op of a layer"));
    }
    partition.ops[op].recompute = true;
  }
  return absl::OkStatus();
}

}  // namespace loom::transform
