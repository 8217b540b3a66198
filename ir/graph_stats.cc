#include "ir/graph_stats.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "ir/op_schema.h"

namespace loom::ir {

GraphStats ComputeStats(const Graph& graph) {
  GraphStats s;
  s.num_tensors = graph.num_tensors();
  s.num_ops = graph.num_ops();
  for (const Tensor& t : graph.tensors()) {
    ++s.tensors_by_role[t.role];
    if (t.producer != kNoId) continue;
    const int64_t bytes = t.shape.num_elements() * DTypeBytes(t.dtype);
    if (t.role == TensorRole::kParameter) {
      s.parameters += t.shape.num_elements();
      s.parameter_bytes += bytes;
    } else if (t.role == TensorRole::kOptimizerState) {
      s.optimizer_state_bytes += bytes;
    } else if (t.role == TensorRole::kInput && !IsFloat(t.dtype) &&
               (t.name == "tokens" || absl::StartsWith(t.name, "tokens.mb"))) {
      s.tokens += t.shape.num_elements();
    }
  }
  std::vector<TensorType> in, out;
  for (const Op& op : graph.ops()) {
    ++s.ops_by_phase[op.info.phase];
    ++s.ops_by_kind[std::string(OpKindName(op.kind))];
    in.clear();
    out.clear();
    for (TensorId id : op.inputs) in.push_back(graph.tensor(id).type());
    for (TensorId id : op.outputs) out.push_back(graph.tensor(id).type());
    s.flops_by_phase[op.info.phase] += GetOpSchema(op.kind).flops(in, out, op.attrs);
    s.num_layers = std::max(s.num_layers, op.info.layer + 1);
    s.num_microbatches = std::max(s.num_microbatches, op.info.microbatch + 1);
  }
  return s;
}

}  // namespace loom::ir
