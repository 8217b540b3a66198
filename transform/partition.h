#ifndef LOOM_TRANSFORM_PARTITION_H_
#define LOOM_TRANSFORM_PARTITION_H_

// Partition decisions: how each logical op is split over the mesh axes and which
// pipeline stages run it. The policy (MegatronPolicy, transform/parallelize.h)
// fills them; Materialize turns them into an ir::Plan, inserting the communication.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::transform {

// How a tensor lies along one mesh axis of a stage's device grid.
enum class AxisKind {
  kReplicated,  // every device of the axis holds the same piece
  kSharded,     // device k of the axis holds chunk k along `dim`
  kPartial,     // the pieces of the axis add up to the value
};

struct AxisLayout {
  AxisKind kind = AxisKind::kReplicated;
  int dim = -1;  // for kSharded
  ir::ReduceOp reduce = ir::ReduceOp::kSum;  // for kPartial: sums, or maxima
  bool operator==(const AxisLayout& o) const {
    return kind == o.kind && dim == o.dim && reduce == o.reduce;
  }
  bool operator!=(const AxisLayout& o) const { return !(*this == o); }
};

// One AxisLayout per grid axis (the mesh axes other than pp, in mesh order).
using Layout = std::vector<AxisLayout>;
std::string LayoutToString(const Layout& layout);  // "S0,P" ("Pmax" for partial maxima)

// The split of one logical op along each grid axis.
struct OpPartition {
  // Virtual pipeline stages that run the op (more than one: replicated across them,
  // e.g. the update of a parameter tied between the first and last stage).
  std::vector<int> stages;
  // Per grid axis: the signature labels split along it (one label and its coupled
  // partners), empty when the op is not split along that axis.
  std::vector<std::vector<std::string>> split_labels;
  // Per grid axis: the op is linear in its inputs and runs on partial sums, giving
  // a partial-sum output (no reduction before it).
  std::vector<bool> on_partials;
  // Recompute this op's forward piece before the backward that reads it.
  bool recompute = false;
};

struct PartitionSpec {
  ir::Mesh mesh;                     // axes dp, pp, tp
  std::vector<int> grid_axes;        // mesh axis indices other than pp
  // Grid axis indices from outermost to innermost split: when several axes split one
  // dim (or one sum), the later ones split the pieces of the earlier ones. dp comes
  // last, so a replica's piece is the unit's piece moved by one extent.
  std::vector<int> nest_order;
  int pp_axis = -1;
  int num_virtual_stages = 1;        // pp * vpp; virtual stage v runs on pp coordinate v % pp
  std::vector<OpPartition> ops;      // by op id
  // Layouts the plan's input values (parameters, optimizer states, data) are
  // created in, by tensor id; empty: created in the layout of each consumer.
  std::vector<Layout> input_layouts;
  // Layouts required of the graph's outputs, by tensor id (empty: any layout
  // without partial sums).
  std::vector<Layout> output_layouts;
  // Write one scale unit (dp coordinate 0) for micro-batch 0 plus replication rules.
  bool factored = false;
  // Parameters ZeRO leaves whole over dp, in spec order: no dim that tensor
  // parallelism leaves whole divides by dp (their gradients are all-reduced and
  // every replica updates them).
  std::vector<std::string> zero_whole;
};

// Input and output layouts of one op under its partition: an input carrying a
// split label is sharded along it, an output lacking a split reduction label is
// partial, everything else replicated (partial under `on_partials`).
struct OpLayouts {
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
};
absl::StatusOr<OpLayouts> LayoutsOf(const ir::Graph& spec, const ir::Op& op,
                                    const PartitionSpec& partition);

// ---------------------------------------------------------------------------
// Primitives: each edits the decisions of one op (or a set of ops) and checks it.

// A partition where every op runs unsplit on virtual stage 0 of a mesh with axes
// dp, pp, tp (dp outermost and nested innermost; see nest_order).
PartitionSpec UnsplitPartition(const ir::Graph& spec, int64_t dp, int64_t pp, int64_t tp);

// split(op, label, axis): split `label` of the op's signature (and its coupled
// labels) along the grid axis named `axis`. Splitting a spatial label slices the
// tensors carrying it; a reduction label makes the outputs partial sums. Fixed
// labels, labels the op does not have and sizes the axis does not divide are errors.
absl::Status Split(const ir::Graph& spec, PartitionSpec& partition, ir::OpId op,
                   const std::string& label, const std::string& axis);

// stage(ops) / assign: run the ops on one virtual pipeline stage.
absl::Status Stage(PartitionSpec& partition, absl::Span<const ir::OpId> ops, int stage);

// replicate(op, stages): run the op, unsplit along pp, on several stages (each
// computes the same value).
absl::Status Replicate(PartitionSpec& partition, ir::OpId op, std::vector<int> stages);

// recompute(ops): re-run these forward ops before the backward ops of their layer.
absl::Status Recompute(const ir::Graph& spec, PartitionSpec& partition,
                       absl::Span<const ir::OpId> ops);

// Builds the plan of `spec` under the decisions of `partition`: tasks for every op
// piece on every device of its stages, and the collectives, slices and send/recv
// that bring each input into the layout its consumer needs.
absl::StatusOr<ir::Plan> Materialize(const ir::Graph& spec, const PartitionSpec& partition);

}  // namespace loom::transform

#endif  // LOOM_TRANSFORM_PARTITION_H_
