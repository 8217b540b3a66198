#include "transform/conversion.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::transform {

LinkModel LinkOf(const std::string& axis_name) {
  if (axis_name == "tp" || axis_name == "sp" || axis_name == "cp") {
    return {300e9, 5e-6};  // inside a node
  }
  return {25e9, 20e-6};  // across nodes
}

namespace {

// Encodes a layout as a comparable key.
std::vector<int> Key(const Layout& l) {
  std::vector<int> k;
  for (const AxisLayout& a : l) {
    k.push_back(static_cast<int>(a.kind) * 1000 + a.dim + 1 +
                (a.reduce == ir::ReduceOp::kMax ? 100000 : 0));
  }
  return k;
}

ConversionStep Step(int axis, AxisLayout to, ConversionKind kind, ir::CollectiveKind c, int dim,
                    int dim2, double seconds) {
  ConversionStep s;
  s.axis = axis;
  s.to = to;
  s.kind = kind;
  s.collective = c;
  s.dim = dim;
  s.dim2 = dim2;
  s.seconds = seconds;
  return s;
}

// The single steps that change one tensor's layout along one grid axis of a
// partition, each priced by the link model of its axis.
class ConversionMoves {
 public:
  ConversionMoves(const ir::TensorType& type, int axes, const PartitionSpec& partition)
      : type_(type),
        partition_(partition),
        axes_(axes),
        rank_(type.shape.rank()),
        total_bytes_(static_cast<double>(type.shape.num_elements()) * ir::DTypeBytes(type.dtype)),
        nest_position_(axes, 0) {
    for (size_t k = 0; k < partition.nest_order.size(); ++k) {
      nest_position_[partition.nest_order[k]] = static_cast<int>(k);
    }
  }

  // Every step out of layout `l`, axis by axis, in a fixed order.
  std::vector<ConversionStep> From(const Layout& l) const {
    std::vector<ConversionStep> out;
    // Data moves between shards only once every partial sum is reduced: gathering
    // or exchanging partial sums is no collective's meaning (ir/collective_semantics.h).
    const bool partial = std::any_of(l.begin(), l.end(), [](const AxisLayout& a) {
      return a.kind == AxisKind::kPartial;
    });
    for (int g = 0; g < axes_; ++g) {
      if (AxisSize(g) <= 1) continue;
      switch (l[g].kind) {
        case AxisKind::kPartial:
          AddReductions(l, g, out);
          break;
        case AxisKind::kSharded:
          if (!partial) AddFromShards(l, g, out);
          break;
        case AxisKind::kReplicated:
          AddFromReplicas(l, g, out);
          break;
      }
    }
    return out;
  }

 private:
  int64_t AxisSize(int g) const { return partition_.mesh.axes()[partition_.grid_axes[g]].size; }
  std::string AxisName(int g) const {
    return partition_.mesh.axes()[partition_.grid_axes[g]].name;
  }
  // Never zero-split over dp: a factored plan cannot write it, and explicit and
  // factored plans take the same paths.
  bool FactoredDp(int g) const { return AxisName(g) == "dp"; }
  // Bytes one device holds under a layout.
  double LocalBytes(const Layout& l) const {
    double b = total_bytes_;
    for (int g = 0; g < axes_; ++g) {
      if (l[g].kind == AxisKind::kSharded) b /= static_cast<double>(AxisSize(g));
    }
    return b;
  }
  // Local size of dim d under a layout (must divide evenly along another axis).
  int64_t LocalDim(const Layout& l, int d) const {
    int64_t size = type_.shape.dim(d);
    for (int g = 0; g < axes_; ++g) {
      if (l[g].kind == AxisKind::kSharded && l[g].dim == d) size /= AxisSize(g);
    }
    return size;
  }
  // A dim may be sharded along several axes when they nest: an axis may add or
  // remove its split only when no inner axis (later in the grid) splits the dim, so
  // every device's piece stays one contiguous box ("inner" in the partition's nest order).
  bool DimFree(const Layout& l, int d, int except) const {
    for (int g = 0; g < axes_; ++g) {
      if (g != except && nest_position_[g] > nest_position_[except] &&
          l[g].kind == AxisKind::kSharded && l[g].dim == d) {
        return false;
      }
    }
    return true;
  }

  // Partial sums along axis g: all-reduced whole, or (sums only) reduce-scattered
  // along a dim.
  void AddReductions(const Layout& l, int g, std::vector<ConversionStep>& out) const {
    const int64_t n = AxisSize(g);
    const LinkModel link = LinkOf(AxisName(g));
    const double bytes = LocalBytes(l);
    const double ring = static_cast<double>(n - 1) / static_cast<double>(n);
    out.push_back(Step(g, {}, ConversionKind::kCollective, ir::CollectiveKind::kAllReduce, -1, -1,
                       link.latency_seconds + 2 * ring * bytes / link.bytes_per_second));
    if (l[g].reduce == ir::ReduceOp::kMax) {
      out.back().reduce = ir::ReduceOp::kMax;
      return;  // partial maxima only become whole
    }
    for (int d = 0; d < rank_; ++d) {
      if (DimFree(l, d, g) && LocalDim(l, d) % n == 0) {
        out.push_back(Step(g, {AxisKind::kSharded, d}, ConversionKind::kCollective,
                           ir::CollectiveKind::kReduceScatter, d, -1,
                           link.latency_seconds + ring * bytes / link.bytes_per_second));
      }
    }
  }

  // Shards along axis g: gathered whole, or exchanged all-to-all into shards of
  // another dim.
  void AddFromShards(const Layout& l, int g, std::vector<ConversionStep>& out) const {
    const AxisLayout& a = l[g];
    if (!DimFree(l, a.dim, g)) return;
    const int64_t n = AxisSize(g);
    const LinkModel link = LinkOf(AxisName(g));
    const double bytes = LocalBytes(l);
    const double ring = static_cast<double>(n - 1) / static_cast<double>(n);
    out.push_back(Step(g, {}, ConversionKind::kCollective, ir::CollectiveKind::kAllGather, a.dim,
                       -1, link.latency_seconds + (n - 1) * bytes / link.bytes_per_second));
    for (int d = 0; d < rank_; ++d) {
      if (d != a.dim && DimFree(l, d, g) && LocalDim(l, d) % n == 0) {
        out.push_back(Step(g, {AxisKind::kSharded, d}, ConversionKind::kCollective,
                           ir::CollectiveKind::kAllToAll, d, a.dim,
                           link.latency_seconds + ring * bytes / link.bytes_per_second));
      }
    }
  }

  // A replicated value along axis g: sliced locally into shards of a dim, or
  // zero-split into partial sums.
  void AddFromReplicas(const Layout& l, int g, std::vector<ConversionStep>& out) const {
    const int64_t n = AxisSize(g);
    const double bytes = LocalBytes(l);
    for (int d = 0; d < rank_; ++d) {
      if (DimFree(l, d, g) && LocalDim(l, d) % n == 0) {
        // A local copy of the kept chunk.
        out.push_back(Step(g, {AxisKind::kSharded, d}, ConversionKind::kSlice,
                           ir::CollectiveKind::kAllReduce, d, -1, 1e-9 + bytes / n / 2e12));
      }
    }
    if (!FactoredDp(g)) {
      out.push_back(Step(g, {AxisKind::kPartial, -1}, ConversionKind::kZeroSplit,
                         ir::CollectiveKind::kAllReduce, -1, -1, 1e-9 + bytes / 2e12));
    }
  }

  const ir::TensorType& type_;
  const PartitionSpec& partition_;
  const int axes_;
  const int rank_;
  const double total_bytes_;
  // Each grid axis's position in the partition's nest order.
  std::vector<int> nest_position_;
};

// Dijkstra over layouts from `from` to `want`; ties broken by the order moves are
// generated. The steps of the cheapest path, nullopt when `want` is out of reach.
std::optional<std::vector<ConversionStep>> CheapestPath(const Layout& from, const Layout& want,
                                                        const ConversionMoves& moves) {
  struct Entry {
    double cost;
    int64_t seq;
    Layout layout;
    bool operator>(const Entry& o) const {
      return cost != o.cost ? cost > o.cost : seq > o.seq;
    }
  };
  std::map<std::vector<int>, double> best;
  std::map<std::vector<int>, std::pair<Layout, ConversionStep>> parent;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  int64_t seq = 0;
  best[Key(from)] = 0;
  queue.push({0, seq++, from});
  while (!queue.empty()) {
    Entry e = queue.top();
    queue.pop();
    if (e.cost > best[Key(e.layout)]) continue;
    if (e.layout == want) break;
    for (const ConversionStep& s : moves.From(e.layout)) {
      Layout next = e.layout;
      next[s.axis] = s.to;
      const double c = e.cost + s.seconds;
      auto it = best.find(Key(next));
      if (it == best.end() || c < it->second) {
        best[Key(next)] = c;
        parent[Key(next)] = {e.layout, s};
        queue.push({c, seq++, next});
      }
    }
  }
  if (!best.count(Key(want))) return std::nullopt;
  std::vector<ConversionStep> path;
  for (Layout cur = want; cur != from;) {
    const auto& [prev, step] = parent.at(Key(cur));
    path.push_back(step);
    cur = prev;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace

absl::StatusOr<std::vector<ConversionStep>> CheapestConversion(const ir::TensorType& type,
                                                               const Layout& from,
                                                               const Layout& want,
                                                               const PartitionSpec& partition) {
  const ConversionMoves moves(type, static_cast<int>(from.size()), partition);
  std::optional<std::vector<ConversionStep>> path = CheapestPath(from, want, moves);
  if (!path.has_value()) {
    std::string text = absl::StrCat(type.ToString(), ": no conversion from ",
                                    LayoutToString(from), " to ", LayoutToString(want));
    return absl::InvalidArgumentError(text);
  }
  return *std::move(path);
}

}  // namespace loom::transform
