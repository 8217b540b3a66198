#ifndef LOOM_IR_GRAPH_STATS_H_
#define LOOM_IR_GRAPH_STATS_H_

#include <cstdint>
#include <map>
#include <string>

#include "ir/graph.h"

namespace loom::ir {

// Counts and costs of a graph, as `loom show` prints them.
struct GraphStats {
  int64_t num_tensors = 0;
  int64_t num_ops = 0;
  std::map<TensorRole, int64_t> tensors_by_role;
  std::map<Phase, int64_t> ops_by_phase;
  std::map<Phase, double> flops_by_phase;
  std::map<std::string, int64_t> ops_by_kind;  // by op name
  int64_t parameters = 0;       // elements of parameter inputs
  int64_t parameter_bytes = 0;  // at their dtypes
  int64_t optimizer_state_bytes = 0;
  int64_t tokens = 0;  // elements of integer data inputs named "tokens" (any micro-batch)
  int num_layers = 0;  // 1 + the largest layer tag
  int num_microbatches = 0;  // 1 + the largest micro-batch tag (0 when untagged)
};

GraphStats ComputeStats(const Graph& graph);

}  // namespace loom::ir

#endif  // LOOM_IR_GRAPH_STATS_H_
