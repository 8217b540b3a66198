#include "ir/collective_semantics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::ir {
namespace {

Box WholeBox(absl::Span<const int64_t> dims) {
  Box box;
  for (int64_t d : dims) box.push_back(Interval{0, d});
  return box;
}

// `box` with its interval along `dim` replaced by chunk k of `size`-element chunks.
Box Chunk(Box box, int dim, int64_t k, int64_t size) {
  box[dim] = Interval{k * size, (k + 1) * size};
  return box;
}

std::string DimsString(absl::Span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

}  // namespace

bool CollectiveReduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter;
}

absl::StatusOr<CollectiveMeaning> MeaningOf(CollectiveKind kind, ReduceOp reduce,
                                            int64_t members, int dim, int dim2,
                                            absl::Span<const int64_t> input_dims) {
  const int rank = static_cast<int>(input_dims.size());
  const std::string name(CollectiveKindName(kind));
  if (members < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, " over ", members, " members"));
  }
  if (!CollectiveReduces(kind) && reduce != ReduceOp::kSum) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce op '", ReduceOpName(reduce), "' on ", name,
                     ", which does not reduce (only all_reduce and reduce_scatter read it)"));
  }
  if (reduce == ReduceOp::kLogSumExp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce op 'logsumexp' on ", name,
        ": partial softmaxes merge in pairs of a value and its log-sum-exp "
        "(attention_merge), never element by element in a collective"));
  }
  // An average combines by sum, then scales by 1 / members.
  const ReduceOp combine = reduce == ReduceOp::kAvg ? ReduceOp::kSum : reduce;
  auto normalize = [&](int d, const char* what) -> absl::StatusOr<int> {
    if (d < 0 || d >= rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", d, " is not a dim of inputs ", DimsString(input_dims)));
    }
    return d;
  };
  auto chunk_of = [&](int d) -> absl::StatusOr<int64_t> {
    if (input_dims[d] % members != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dim ", d, " of inputs ", DimsString(input_dims),
                       " does not split into ", members, " equal chunks"));
    }
    return input_dims[d] / members;
  };
  const int n = static_cast<int>(members);
  const Box whole = WholeBox(input_dims);
  CollectiveMeaning m;
  m.output_dims.assign(input_dims.begin(), input_dims.end());
  if (reduce == ReduceOp::kAvg) m.scale = Rational::Of(1, members);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      m.reduce = combine;
      m.outputs = n;
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) m.moves.push_back({i, whole, j, whole});
      }
      break;
    case CollectiveKind::kReduceScatter: {
      auto d = normalize(dim, "dim");
      if (!d.ok()) return d.status();
      auto size = chunk_of(*d);
      if (!size.ok()) return size.status();
      m.reduce = combine;
      m.outputs = n;
      m.output_dims[*d] = *size;
      const Box out = WholeBox(m.output_dims);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) m.moves.push_back({i, out, j, Chunk(whole, *d, i, *size)});
      }
      break;
    }
    case CollectiveKind::kAllGather: {
      auto d = normalize(dim, "dim");
      if (!d.ok()) return d.status();
      m.outputs = n;
      m.output_dims[*d] = input_dims[*d] * n;
      const Box out = WholeBox(m.output_dims);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          m.moves.push_back({i, Chunk(out, *d, j, input_dims[*d]), j, whole});
        }
      }
      break;
    }
    case CollectiveKind::kAllToAll: {
      auto d = normalize(dim, "dim");
      if (!d.ok()) return d.status();
      auto d2 = normalize(dim2, "dim2");
      if (!d2.ok()) return d2.status();
      if (*d == *d2) {
        return absl::InvalidArgumentError(
            absl::StrCat("dim and dim2 are both ", *d, " (all_to_all splits one dim and joins another)"));
      }
      auto size = chunk_of(*d);
      if (!size.ok()) return size.status();
      m.outputs = n;
      m.output_dims[*d] = *size;
      m.output_dims[*d2] = input_dims[*d2] * n;
      const Box out = WholeBox(m.output_dims);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          m.moves.push_back(
              {i, Chunk(out, *d2, j, input_dims[*d2]), j, Chunk(whole, *d, i, *size)});
        }
      }
      break;
    }
    case CollectiveKind::kBroadcast:
      m.outputs = n;
      for (int i = 0; i < n; ++i) m.moves.push_back({i, whole, 0, whole});
      break;
    case CollectiveKind::kSendRecv:
      if (n != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("send_recv needs exactly 2 devices (source, destination), has ", n));
      }
      m.outputs = 1;
      m.moves.push_back({0, whole, 0, whole});
      break;
  }
  return m;
}

absl::StatusOr<CollectiveMeaning> MeaningOf(const Collective& c,
                                            absl::Span<const int64_t> input_dims,
                                            int64_t members) {
  if (members < 0) members = static_cast<int64_t>(c.devices.size());
  return MeaningOf(c.kind, c.reduce, members, c.dim, c.dim2, input_dims);
}

}  // namespace loom::ir
