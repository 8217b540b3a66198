#ifndef LOOM_TRANSFORM_CONVERSION_H_
#define LOOM_TRANSFORM_CONVERSION_H_

// The cheapest way to bring a tensor from one layout into another on the same
// device grid: a shortest path over layouts (per axis: replicated, sharded along a
// dim, partial sums), one axis changing per step, priced by a cost model of bytes
// and latency per link type.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "transform/partition.h"

namespace loom::transform {

enum class ConversionKind {
  kCollective,  // all_reduce, reduce_scatter, all_gather, all_to_all along the axis
  kSlice,       // replicated -> sharded: each device keeps its chunk (no traffic)
  kZeroSplit,   // replicated -> partial: one device keeps the value, the others zero
};

struct ConversionStep {
  int axis = 0;  // grid axis
  AxisLayout to;
  ConversionKind kind = ConversionKind::kCollective;
  ir::CollectiveKind collective = ir::CollectiveKind::kAllReduce;
  int dim = -1;   // gathered / scattered / split dim
  int dim2 = -1;  // all_to_all: the dim the pieces are concatenated along
  ir::ReduceOp reduce = ir::ReduceOp::kSum;  // all_reduce of partial maxima: max
  double seconds = 0;  // modelled cost
};

// Link model of a mesh axis: tensor parallelism inside a node (NVLink-class),
// data and pipeline parallelism across nodes (InfiniBand-class).
struct LinkModel {
  double bytes_per_second;
  double latency_seconds;
};
LinkModel LinkOf(const std::string& axis_name);

// Steps from `from` to `want` for a tensor of `type`, minimising the modelled time.
// A dim sharded along several axes nests them in grid order (outer axis first). The dp axis is never
// zero-split (a factored plan does not write its replicas out).
absl::StatusOr<std::vector<ConversionStep>> CheapestConversion(const ir::TensorType& type,
                                                               const Layout& from,
                                                               const Layout& want,
                                                               const PartitionSpec& partition);

}  // namespace loom::transform

#endif  // LOOM_TRANSFORM_CONVERSION_H_
