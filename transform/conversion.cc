#include "transform/conversion.h"

#include <algorithm>
#include <map>
#include <queue>

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

}  // namespace

absl::StatusOr<std::vector<ConversionStep>> CheapestConversion(const ir::TensorType& type,
                                                               const Layout& from,
                                                               const Layout& want,
                                                               const PartitionSpec& partition) {
  const int axes = static_cast<int>(from.size());
  const int rank = type.shape.rank();
  const double total_bytes =
      static_cast<double>(type.shape.num_elements()) * ir::DTypeBytes(type.dtype);
  auto axis_size = [&](int g) { return partition.mesh.axes()[partition.grid_axes[g]].size; };
  auto axis_name = [&](int g) { return partition.mesh.axes()[partition.grid_axes[g]].name; };
  // Never zero-split over dp: a factored plan cannot write it, and explicit and
  // factored plans take the same paths.
  auto factored_dp = [&](int g) { return axis_name(g) == "dp"; };
  // Bytes one device holds under a layout.
  auto local_bytes = [&](const Layout& l) {
    double b = total_bytes;
    for (int g = 0; g < axes; ++g) {
      if (l[g].kind == AxisKind::kSharded) b /= static_cast<double>(axis_size(g));
    }
    return b;
  };
  // Local size of dim d under a layout (must divide evenly along another axis).
  auto local_dim = [&](const Layout& l, int d) {
    int64_t size = type.shape.dim(d);
    for (int g = 0; g < axes; ++g) {
      if (l[g].kind == AxisKind::kSharded && l[g].dim == d) size /= axis_size(g);
    }
    return size;
  };
  // A dim may be sharded along several axes when they nest: an axis may add or
  // remove its split only when no inner axis (later in the grid) splits the dim, so
  // every device's piece stays one contiguous box ("inner" in the partition's nest order).
  std::vector<int> nest_position(axes, 0);
  for (size_t k = 0; k < partition.nest_order.size(); ++k) {
    nest_position[partition.nest_order[k]] = static_cast<int>(k);
  }
  auto dim_free = [&](const Layout& l, int d, int except) {
    for (int g = 0; g < axes; ++g) {
      if (g != except && nest_position[g] > nest_position[except] &&
          l[g].kind == AxisKind::kSharded && l[g].dim == d) {
        return false;
      }
    }
    return true;
  };
  auto moves = [&](const Layout& l) {
    std::vector<ConversionStep> out;
    // Data moves between shards only once every partial sum is reduced: gathering
    // or exchanging partial sums is no collective's meaning (ir/collective_semantics.h).
    const bool partial = std::any_of(l.begin(), l.end(), [](const AxisLayout& a) {
      return a.kind == AxisKind::kPartial;
    });
    for (int g = 0; g < axes; ++g) {
      const int64_t n = axis_size(g);
      if (n <= 1) continue;
      const LinkModel link = LinkOf(axis_name(g));
      const double bytes = local_bytes(l);
      const double ring = static_cast<double>(n - 1) / static_cast<double>(n);
      auto add = [&](AxisLayout to, ConversionKind kind, ir::CollectiveKind c, int dim, int dim2,
                     double seconds) {
        ConversionStep s;
        s.axis = g;
        s.to = to;
        s.kind = kind;
        s.collective = c;
        s.dim = dim;
        s.dim2 = dim2;
        s.seconds = seconds;
        out.push_back(s);
      };
      const AxisLayout& a = l[g];
      switch (a.kind) {
        case AxisKind::kPartial:
          add({}, ConversionKind::kCollective, ir::CollectiveKind::kAllReduce, -1, -1,
              link.latency_seconds + 2 * ring * bytes / link.bytes_per_second);
          if (a.reduce == ir::ReduceOp::kMax) {
            out.back().reduce = ir::ReduceOp::kMax;
            break;  // partial maxima only become whole
          }
          for (int d = 0; d < rank; ++d) {
            if (dim_free(l, d, g) && local_dim(l, d) % n == 0) {
              add({AxisKind::kSharded, d}, ConversionKind::kCollective,
                  ir::CollectiveKind::kReduceScatter, d, -1,
                  link.latency_seconds + ring * bytes / link.bytes_per_second);
            }
          }
          break;
        case AxisKind::kSharded:
          if (partial || !dim_free(l, a.dim, g)) break;
          add({}, ConversionKind::kCollective, ir::CollectiveKind::kAllGather, a.dim, -1,
              link.latency_seconds + (n - 1) * bytes / link.bytes_per_second);
          for (int d = 0; d < rank; ++d) {
            if (d != a.dim && dim_free(l, d, g) && local_dim(l, d) % n == 0) {
              add({AxisKind::kSharded, d}, ConversionKind::kCollective,
                  ir::CollectiveKind::kAllToAll, d, a.dim,
                  link.latency_seconds + ring * bytes / link.bytes_per_second);
            }
          }
          break;
        case AxisKind::kReplicated:
          for (int d = 0; d < rank; ++d) {
            if (dim_free(l, d, g) && local_dim(l, d) % n == 0) {
              // A local copy of the kept chunk.
              add({AxisKind::kSharded, d}, ConversionKind::kSlice,
                  ir::CollectiveKind::kAllReduce, d, -1, 1e-9 + bytes / n / 2e12);
            }
          }
          if (!factored_dp(g)) {
            add({AxisKind::kPartial, -1}, ConversionKind::kZeroSplit,
                ir::CollectiveKind::kAllReduce, -1, -1, 1e-9 + bytes / 2e12);
          }
          break;
      }
    }
    return out;
  };

  // Dijkstra over layouts; ties broken by the order moves are generated.
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
    for (const ConversionStep& s : moves(e.layout)) {
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
  if (!best.count(Key(want))) {
    std::string text = absl::StrCat(type.ToString(), ": no conversion from ",
                                    LayoutToString(from), " to ", LayoutToString(want));
    return absl::InvalidArgumentError(text);
  }
  std::vector<ConversionStep> path;
  for (Layout cur = want; cur != from;) {
    const auto& [prev, step] = parent.at(Key(cur));
    path.push_back(step);
    cur = prev;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace loom::transform
