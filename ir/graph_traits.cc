#include "ir/graph_traits.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include <boost/graph/topological_sort.hpp>
#include <boost/property_map/property_map.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::ir {

absl::StatusOr<std::vector<OpId>> TopologicalOrder(const Graph& graph) {
  std::vector<boost::default_color_type> colors(graph.num_ops());
  auto color_map = boost::make_iterator_property_map(colors.begin(),
                                                     boost::identity_property_map());
  std::vector<OpId> reversed;
  try {
    boost::topological_sort(graph, std::back_inserter(reversed), boost::color_map(color_map));
  } catch (const boost::not_a_dag&) {
    // Find an op on a cycle to name: one whose successor has a smaller id is a
    // back edge candidate in creation order.
    for (const Op& op : graph.ops()) {
      for (OpId next : graph.successors(op.id)) {
        if (next <= op.id) {
          return absl::InvalidArgumentError(
              absl::StrCat("graph '", graph.name(), "' has a cycle through ",
                           DescribeOp(graph, op)));
        }
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("graph '", graph.name(), "' has a cycle"));
  }
  std::reverse(reversed.begin(), reversed.end());
  return reversed;
}

std::vector<OpId> AncestorOps(const Graph& graph, absl::Span<const TensorId> tensors) {
  std::vector<bool> seen(graph.num_ops(), false);
  std::vector<OpId> stack;
  for (TensorId t : tensors) {
    OpId p = graph.tensor(t).producer;
    if (p != kNoId && !seen[p]) {
      seen[p] = true;
      stack.push_back(p);
    }
  }
  while (!stack.empty()) {
    OpId op = stack.back();
    stack.pop_back();
    for (TensorId in : graph.op(op).inputs) {
      OpId p = graph.tensor(in).producer;
      if (p != kNoId && !seen[p]) {
        seen[p] = true;
        stack.push_back(p);
      }
    }
  }
  std::vector<OpId> result;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    if (seen[id]) result.push_back(id);
  }
  return result;
}

}  // namespace loom::ir
