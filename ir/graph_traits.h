#ifndef LOOM_IR_GRAPH_TRAITS_H_
#define LOOM_IR_GRAPH_TRAITS_H_

// Boost.Graph view of an ir::Graph: vertices are ops, an edge runs from the
// producer of a tensor to each op reading it. No structure is copied; the view
// reads Graph::successors(). Include this header to run Boost.Graph algorithms
// (topological_sort, depth_first_search, dominator_tree, ...) on a graph.

#include <cstddef>
#include <utility>

#include <boost/graph/graph_traits.hpp>
#include <boost/iterator/counting_iterator.hpp>
#include <boost/iterator/iterator_facade.hpp>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"

namespace loom::ir {

struct OpEdge {
  OpId source = kNoId;
  OpId target = kNoId;
  int index = 0;  // position in source's successor list (parallel edges differ here)
  bool operator==(const OpEdge& o) const {
    return source == o.source && index == o.index;
  }
  bool operator!=(const OpEdge& o) const { return !(*this == o); }
};

class OpEdgeIterator
    : public boost::iterator_facade<OpEdgeIterator, OpEdge, boost::forward_traversal_tag,
                                    OpEdge> {
 public:
  OpEdgeIterator() = default;
  OpEdgeIterator(const Graph* graph, OpId source, int index)
      : graph_(graph), source_(source), index_(index) {}

 private:
  friend class boost::iterator_core_access;
  OpEdge dereference() const {
    return OpEdge{source_, graph_->successors(source_)[index_], index_};
  }
  bool equal(const OpEdgeIterator& o) const { return source_ == o.source_ && index_ == o.index_; }
  void increment() { ++index_; }

  const Graph* graph_ = nullptr;
  OpId source_ = kNoId;
  int index_ = 0;
};

struct OpGraphTraversalTag : boost::incidence_graph_tag, boost::vertex_list_graph_tag {};

}  // namespace loom::ir

namespace boost {

template <>
struct graph_traits<loom::ir::Graph> {
  using vertex_descriptor = loom::ir::OpId;
  using edge_descriptor = loom::ir::OpEdge;
  using directed_category = directed_tag;
  using edge_parallel_category = allow_parallel_edge_tag;
  using traversal_category = loom::ir::OpGraphTraversalTag;
  using vertex_iterator = counting_iterator<loom::ir::OpId>;
  using out_edge_iterator = loom::ir::OpEdgeIterator;
  using degree_size_type = std::size_t;
  using vertices_size_type = std::size_t;
  using edges_size_type = std::size_t;
  using in_edge_iterator = void;
  using edge_iterator = void;
  using adjacency_iterator = void;
  static vertex_descriptor null_vertex() { return loom::ir::kNoId; }
};

}  // namespace boost

namespace loom::ir {

// Boost.Graph free functions, found by argument-dependent lookup.
inline std::pair<boost::counting_iterator<OpId>, boost::counting_iterator<OpId>> vertices(
    const Graph& g) {
  return {boost::counting_iterator<OpId>(0), boost::counting_iterator<OpId>(g.num_ops())};
}
inline std::size_t num_vertices(const Graph& g) { return static_cast<std::size_t>(g.num_ops()); }
inline std::pair<OpEdgeIterator, OpEdgeIterator> out_edges(OpId v, const Graph& g) {
  return {OpEdgeIterator(&g, v, 0),
          OpEdgeIterator(&g, v, static_cast<int>(g.successors(v).size()))};
}
inline std::size_t out_degree(OpId v, const Graph& g) { return g.successors(v).size(); }
inline OpId source(const OpEdge& e, const Graph&) { return e.source; }
inline OpId target(const OpEdge& e, const Graph&) { return e.target; }

// Ops in an order where every op comes after the producers of its inputs, by
// Boost's topological_sort; an error names an op on a cycle (a graph read from
// another system may have one even though Graph::AddOp never creates one).
absl::StatusOr<std::vector<OpId>> TopologicalOrder(const Graph& graph);

// The ops the given tensors depend on (transitively), in id order.
std::vector<OpId> AncestorOps(const Graph& graph, absl::Span<const TensorId> tensors);

}  // namespace loom::ir

#endif  // LOOM_IR_GRAPH_TRAITS_H_
