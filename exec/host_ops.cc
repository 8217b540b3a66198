#include "exec/host_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/collective_semantics.h"
#include "ir/status_macros.h"

namespace loom::exec {

using ir::Box;
using ir::Collective;
using ir::CollectiveKind;
using ir::HostTensor;
using ir::PlanValue;
using ir::Task;

namespace {

// Every input has the dims of input 0, or input 0's except along `except`.
absl::Status CheckSameDims(absl::string_view who, absl::Span<const HostTensor* const> in,
                           int except) {
  const ir::Shape& first = in[0]->shape;
  for (size_t j = 1; j < in.size(); ++j) {
    bool same = in[j]->shape.rank() == first.rank();
    for (int d = 0; same && d < first.rank(); ++d) {
      same = d == except || in[j]->shape.dim(d) == first.dim(d);
    }
    if (!same) {
      return PlanError(who, absl::StrCat("input ", j, " has shape ", in[j]->shape.ToString(),
                                         ", input 0 has ", first.ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Dense tensor helpers.

// Copies the block of `extents` at `src_origin` in `src` to `dst_origin` in `dst`.
void CopyBlock(const HostTensor& src, absl::Span<const int64_t> src_origin, HostTensor& dst,
               absl::Span<const int64_t> dst_origin, absl::Span<const int64_t> extents) {
  const int rank = static_cast<int>(extents.size());
  for (int64_t e : extents) {
    if (e == 0) return;
  }
  const std::vector<int64_t> src_strides = src.shape.Strides();
  const std::vector<int64_t> dst_strides = dst.shape.Strides();
  std::vector<int64_t> index(rank, 0);
  while (true) {
    int64_t s = 0;
    int64_t d = 0;
    for (int i = 0; i < rank; ++i) {
      s += (src_origin[i] + index[i]) * src_strides[i];
      d += (dst_origin[i] + index[i]) * dst_strides[i];
    }
    dst.data[d] = src.data[s];
    int i = rank - 1;
    for (; i >= 0; --i) {
      if (++index[i] < extents[i]) break;
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

// The region `box` of `t` (the box must lie inside t's shape).
void ScaleBy(HostTensor& t, const ir::Rational& scale) {
  if (scale.IsOne()) return;
  const double factor = scale.ToDouble();
  for (int64_t e = 0; e < t.size(); ++e) t[e] *= factor;
}

HostTensor SliceBox(const HostTensor& t, const Box& box) {
  std::vector<int64_t> origin;
  std::vector<int64_t> extents;
  for (const ir::Interval& iv : box) {
    origin.push_back(iv.begin);
    extents.push_back(iv.size());
  }
  HostTensor out(ir::Shape(extents), t.dtype);
  CopyBlock(t, origin, out, std::vector<int64_t>(box.size(), 0), extents);
  return out;
}

// Positions [begin, begin + size) of `t` along `dim`.
HostTensor SliceDim(const HostTensor& t, int dim, int64_t begin, int64_t size) {
  Box box = ir::FullBox(t.shape);
  box[dim] = ir::Interval{begin, begin + size};
  return SliceBox(t, box);
}

// `parts` concatenated along `dim` (same rank, equal dims elsewhere: checked by callers).
HostTensor ConcatDim(absl::Span<const HostTensor> parts, int dim) {
  std::vector<int64_t> dims = parts[0].shape.dims();
  dims[dim] = 0;
  for (const HostTensor& p : parts) dims[dim] += p.shape.dim(dim);
  HostTensor out(ir::Shape(dims), parts[0].dtype);
  std::vector<int64_t> origin(dims.size(), 0);
  for (const HostTensor& p : parts) {
    CopyBlock(p, std::vector<int64_t>(dims.size(), 0), out, origin, p.shape.dims());
    origin[dim] += p.shape.dim(dim);
  }
  return out;
}

// ---------------------------------------------------------------------------
// How errors name things.

std::string DescribeValue(const ir::Graph& spec, const PlanValue& v) {
  std::string tensor = v.sub.tensor >= 0 && v.sub.tensor < spec.num_tensors()
                           ? absl::StrCat("'", spec.tensor(v.sub.tensor).name, "'")
                           : absl::StrCat("tensor ", v.sub.tensor);
  return absl::StrCat("value ", v.id, " (device ", v.device, ", ", tensor, " ",
                      ir::BoxToString(v.sub.box), " ", v.sub.part.ToString(), ")");
}

std::string DescribeTask(const Task& t) {
  return absl::StrCat("task ", t.id, " (device ", t.device, ", ", ir::OpKindName(t.kind), ")");
}

std::string DescribeCollective(const Collective& c) {
  return absl::StrCat("collective ", c.id, " (", ir::CollectiveKindName(c.kind),
                      " over devices ", absl::StrJoin(c.devices, ","), ")");
}

absl::Status PlanError(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("plan: ", where, ": ", what));
}

// Number of inputs / outputs a collective over `n` devices has.
bool CollectiveArityOk(const Collective& c) {
  const size_t n = c.devices.size();
  switch (c.kind) {
    case CollectiveKind::kSendRecv:
      return n == 2 && c.inputs.size() == 1 && c.outputs.size() == 1;
    case CollectiveKind::kBroadcast:
      return (c.inputs.size() == 1 || c.inputs.size() == n) && c.outputs.size() == n;
    default:
      return c.inputs.size() == n && c.outputs.size() == n;
  }
}

// Device that holds the i-th input / output of a collective.
int64_t CollectiveInputDevice(const Collective& c, size_t i) { return c.devices[i]; }
int64_t CollectiveOutputDevice(const Collective& c, size_t i) {
  return c.kind == CollectiveKind::kSendRecv ? c.devices[1] : c.devices[i];
}

absl::StatusOr<std::vector<HostTensor>> CollectiveOutputs(const Collective& c,
                                                     absl::Span<const HostTensor* const> in) {
  const std::string who = DescribeCollective(c);
  LOOM_RETURN_IF_ERROR(CheckSameDims(who, in, /*except=*/-1));
  const HostTensor& first = *in[0];
  absl::StatusOr<ir::CollectiveMeaning> meaning = ir::MeaningOf(c, first.shape.dims());
  if (!meaning.ok()) return PlanError(who, meaning.status().message());
  std::vector<HostTensor> out(meaning->outputs,
                              HostTensor(ir::Shape(meaning->output_dims), first.dtype));
  std::vector<bool> written(meaning->outputs, false);
  for (const ir::CollectiveMove& move : meaning->moves) {
    if (move.source >= static_cast<int>(in.size())) {
      return PlanError(who, absl::StrCat("has ", in.size(), " inputs, reads input ", move.source));
    }
    HostTensor& target = out[move.target];
    if (meaning->reduce.has_value() && written[move.target]) {
      // Every move into a reducing collective's output covers all of it.
      const HostTensor piece = SliceBox(*in[move.source], move.from);
      for (int64_t e = 0; e < target.size(); ++e) {
        target[e] = ir::Reduce(*meaning->reduce, target[e], piece[e]);
      }
    } else {
      std::vector<int64_t> from, to, extents;
      for (size_t d = 0; d < move.from.size(); ++d) {
        from.push_back(move.from[d].begin);
        to.push_back(move.to[d].begin);
        extents.push_back(move.from[d].size());
      }
      CopyBlock(*in[move.source], from, target, to, extents);
    }
    written[move.target] = true;
  }
  for (HostTensor& t : out) ScaleBy(t, meaning->scale);
  return out;
}

// Smallest vocabulary in `spec`: rows of embedding tables, classes of cross-entropy
// logits. Integer inputs drawn below it are valid for every op reading them.
std::optional<int64_t> SmallestVocabulary(const ir::Graph& spec) {
  std::optional<int64_t> bound;
  auto take = [&](int64_t b) {
    if (b > 0 && (!bound.has_value() || b < *bound)) bound = b;
  };
  for (const ir::Op& op : spec.ops()) {
    switch (op.kind) {
      case ir::OpKind::kEmbedding:
        take(spec.tensor(op.inputs[1]).shape.dim(0));
        break;
      case ir::OpKind::kEmbeddingGrad:
        take(spec.tensor(op.outputs[0]).shape.dim(0));
        break;
      case ir::OpKind::kCrossEntropy:
      case ir::OpKind::kCrossEntropyGrad: {
        const ir::Shape& logits = spec.tensor(op.inputs[0]).shape;
        if (logits.rank() > 0) take(logits.dim(logits.rank() - 1));
        break;
      }
      default:
        break;
    }
  }
  return bound;
}

RoleClass ClassOf(ir::TensorRole role) {
  switch (role) {
    case ir::TensorRole::kLoss:
      return RoleClass::kLoss;
    case ir::TensorRole::kGradient:
      return RoleClass::kGradient;
    case ir::TensorRole::kParameter:
    case ir::TensorRole::kOptimizerState:
      return RoleClass::kParameter;
    default:
      return RoleClass::kOther;
  }
}

double MaxAbs(const HostTensor& t) {
  double m = 0.0;
  for (double x : t.data) m = std::max(m, std::abs(x));
  return m;
}

double MaxDiff(const HostTensor& a, const HostTensor& b) {
  double m = 0.0;
  for (int64_t i = 0; i < a.size(); ++i) {
    double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) {
      const bool same = a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]));
      d = same ? 0.0 : std::numeric_limits<double>::infinity();
    }
    m = std::max(m, d);
  }
  return m;
}

}  // namespace loom::exec
