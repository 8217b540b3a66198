#include "verify/laws.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/ops/op_attrs.h"
#include "ir/status_macros.h"
#include "smt/prove.h"
#include "smt/term.h"
#include "verify/sym_formulas.h"
#include "verify/sym_ops.h"

namespace loom::verify {
namespace {

using ir::Box;
using ir::Interval;

// The elements of `t` inside `box`, row-major.
template <class Tensor>
Tensor Slice(const Tensor& t, const Box& box) {
  Tensor out;
  std::vector<int64_t> dims;
  for (const Interval& iv : box) dims.push_back(iv.size());
  out.shape = ir::Shape(dims);
  out.dtype = t.dtype;
  const int rank = t.shape.rank();
  const std::vector<int64_t> strides = t.shape.Strides();
  const int64_t n = out.shape.num_elements();
  out.data.reserve(n);
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t flat = 0;
    for (int d = 0; d < rank; ++d) flat += (box[d].begin + idx[d]) * strides[d];
    out.data.push_back(t.data[flat]);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// The box of a tensor whose dims carry `labels`, for label intervals given as
// fractions of their extents.
bool BoxFor(const std::vector<std::string>& labels, const ir::Shape& shape,
            const std::map<std::string, std::pair<Interval, int64_t>>& at, Box* box) {
  box->clear();
  for (size_t d = 0; d < labels.size(); ++d) {
    const int64_t e = shape.dim(static_cast<int>(d));
    auto it = at.find(labels[d]);
    if (it == at.end()) {
      box->push_back(Interval{0, e});
      continue;
    }
    const auto& [iv, le] = it->second;
    if ((iv.begin * e) % le != 0 || (iv.end * e) % le != 0) return false;
    box->push_back(Interval{iv.begin * e / le, iv.end * e / le});
  }
  return true;
}

// `at` with every label missing from it that is coupled with one present (an
// output-only label: moe_dispatch's slot columns follow its tokens) covering the
// same fraction as its partner, as the derivation gives the piece's output boxes.
std::map<std::string, std::pair<Interval, int64_t>> WithCoupled(
    const ir::DimSignature& sig, std::map<std::string, std::pair<Interval, int64_t>> at) {
  for (const auto& group : sig.coupled) {
    for (const std::string& l : group) {
      if (at.count(l) > 0) continue;
      for (const std::string& partner : group) {
        auto it = at.find(partner);
        if (it == at.end()) continue;
        at[l] = it->second;
        break;
      }
    }
  }
  return at;
}

LawProof Unknown(std::string why) {
  LawProof p;
  p.verdict = smt::Verdict::kUnknown;
  p.detail = std::move(why);
  return p;
}

// Symbolic backend: every input element a fresh variable.
struct SymbolicBackend {
  using Tensor = SymTensor;
  using Elem = smt::TermId;
  smt::Terms& terms;
  Tensor Inputs(const ir::TensorType& type, const std::string& prefix) {
    Tensor t;
    t.shape = type.shape;
    t.dtype = type.dtype;
    const int64_t n = type.shape.num_elements();
    t.data.reserve(n);
    for (int64_t i = 0; i < n; ++i) t.data.push_back(terms.Var(absl::StrCat(prefix, "_", i)));
    return t;
  }
  Elem Add(Elem a, Elem c) { return terms.Add(a, c); }
  Elem Zero() { return terms.Zero(); }
  Elem Sum(const std::vector<Elem>& v) { return terms.Sum(v); }
  Elem Max(const std::vector<Elem>& v) { return terms.Max(v); }
  Elem MergeValue(const std::vector<Elem>& values, const std::vector<Elem>& lses) {
    return internal::MergedValue(terms, values, lses);
  }
  Elem MergeLse(const std::vector<Elem>& lses) { return internal::MergedLogSumExp(terms, lses); }
  absl::StatusOr<std::vector<Tensor>> Eval(ir::OpKind kind, std::vector<const Tensor*> in,
                                           const ir::AttrMap& attrs) {
    return EvalSymbolic(terms, kind, in, attrs);
  }
};

// Numeric backend: the reference kernels in double precision on random inputs,
// positive reals (inside every op's domain) and small non-negative integers.
struct NumericBackend {
  using Tensor = ir::HostTensor;
  using Elem = double;
  std::mt19937_64 rng;
  Tensor Inputs(const ir::TensorType& type, const std::string&) {
    Tensor t(type.shape, type.dtype);
    const bool integer = !ir::IsFloat(type.dtype);
    for (double& v : t.data) {
      v = integer ? static_cast<double>(rng() % 4) : static_cast<double>(rng() % 32 + 1) / 8.0;
    }
    return t;
  }
  Elem Add(Elem a, Elem c) { return a + c; }
  Elem Zero() { return 0; }
  Elem Sum(const std::vector<Elem>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  }
  Elem Max(const std::vector<Elem>& v) {
    double m = -INFINITY;
    for (double x : v) m = std::max(m, x);
    return v.empty() ? 0 : m;
  }
  // The online-softmax merge, as attention_merge's kernel computes it.
  Elem MergeValue(const std::vector<Elem>& values, const std::vector<Elem>& lses) {
    std::vector<double> w;
    ir::ops::MergeLogSumExps(lses, &w);
    double acc = 0;
    for (size_t i = 0; i < values.size(); ++i) acc += values[i] * w[i];
    return acc;
  }
  Elem MergeLse(const std::vector<Elem>& lses) {
    std::vector<double> w;
    return ir::ops::MergeLogSumExps(lses, &w);
  }
  absl::StatusOr<std::vector<Tensor>> Eval(ir::OpKind kind, std::vector<const Tensor*> in,
                                           const ir::AttrMap& attrs) {
    std::vector<ir::TensorType> types;
    for (const Tensor* t : in) types.push_back(ir::TensorType{t->shape, t->dtype});
    LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> out_types,
                          ir::InferOutputTypes(kind, types, attrs));
    std::vector<Tensor> out;
    for (const auto& ty : out_types) out.emplace_back(ty.shape, ty.dtype);
    LOOM_RETURN_IF_ERROR(ir::GetOpSchema(kind).kernel(in, attrs, absl::MakeSpan(out)));
    return out;
  }
};

// Label intervals, each with its label's extent: a piece of an op's index space.
using LabelIntervals = std::map<std::string, std::pair<Interval, int64_t>>;

// The law's op as built on the law's input types: its schema, dim signature and
// output types.
struct LawOp {
  const LawUse& law;
  const ir::OpSchema& schema;
  ir::DimSignature sig;
  std::vector<ir::TensorType> out_types;
};

// The reduction labels the law's piece splits, and whether one of them is a
// maximum's.
struct SplitReductions {
  std::vector<std::string> labels;
  bool is_max = false;
  bool is_softmax = false;  // a softmax's axis: outputs 0 and 1 merge as pairs
};

SplitReductions SplitReductionsOf(const LawUse& law, const ir::DimSignature& sig) {
  SplitReductions reduced;
  for (size_t k = 0; k < law.labels.size(); ++k) {
    auto kind_it = sig.kinds.find(law.labels[k]);
    if (kind_it == sig.kinds.end()) continue;
    const bool red = kind_it->second == ir::DimKind::kReduction ||
                     kind_it->second == ir::DimKind::kMaxReduction ||
                     kind_it->second == ir::DimKind::kLogSumExpReduction;
    const bool full = law.intervals[k].begin == 0 && law.intervals[k].end == law.extents[k];
    if (red && !full) {
      reduced.labels.push_back(law.labels[k]);
      if (kind_it->second == ir::DimKind::kMaxReduction) reduced.is_max = true;
      if (kind_it->second == ir::DimKind::kLogSumExpReduction) reduced.is_softmax = true;
    }
  }
  return reduced;
}

// Every sibling chunk assignment of the reduced labels: equal chunks where the
// piece's interval divides the extent, else the piece's interval and what lies
// before and after it (a pipeline stage's rows of a stack of every parameter's
// norm): any partition of a reduction adds up to it. nullopt for an empty chunk.
std::optional<std::vector<LabelIntervals>> SiblingPieces(
    const LabelIntervals& at, const std::vector<std::string>& reduced) {
  if (reduced.empty()) return std::vector<LabelIntervals>{at};
  std::vector<LabelIntervals> acc = {at};
  for (const std::string& l : reduced) {
    const auto [iv, e] = at.at(l);
    if (iv.size() <= 0) return std::nullopt;
    std::vector<Interval> chunks;
    if (e % iv.size() == 0 && iv.begin % iv.size() == 0) {
      for (int64_t b = 0; b < e; b += iv.size()) chunks.push_back(Interval{b, b + iv.size()});
    } else {
      if (iv.begin > 0) chunks.push_back(Interval{0, iv.begin});
      chunks.push_back(iv);
      if (iv.end < e) chunks.push_back(Interval{iv.end, e});
    }
    std::vector<LabelIntervals> next;
    for (const auto& a : acc) {
      for (const Interval& chunk : chunks) {
        auto c = a;
        c[l] = {chunk, e};
        next.push_back(std::move(c));
      }
    }
    acc = std::move(next);
  }
  return acc;
}

// A causal op's sibling pieces whose queries see none of their keys (every key
// after the block's last query): they hold nothing, and the derivation reaches its
// neighbours' chunks over them (verify/derive_compute.cc); the law's own piece stays.
void DropUnseenPieces(const LawUse& law, const LabelIntervals& at,
                      std::vector<LabelIntervals>* siblings) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  const std::optional<int64_t> shift = ir::CausalShift(schema, law.attrs);
  if (!shift.has_value()) return;
  std::vector<LabelIntervals> kept;
  for (LabelIntervals& piece : *siblings) {
    auto s = piece.find(schema.causal_mask->queries);
    auto t = piece.find(schema.causal_mask->keys);
    const bool unseen = s != piece.end() && t != piece.end() &&
                        t->second.first.begin >= s->second.first.end + *shift;
    if (!unseen || piece == at) kept.push_back(std::move(piece));
  }
  *siblings = std::move(kept);
}

// Runs the piece of `op` for label intervals `label_pat` on inputs `src` (its
// additive inputs zeroed unless `keep_additive`): its outputs and their boxes.
// False when the piece has no valid boxes, attributes or shapes.
template <class B>
bool RunPiece(B& b, const LawOp& op, const LabelIntervals& label_pat,
              const std::vector<typename B::Tensor>& src, bool keep_additive,
              std::vector<typename B::Tensor>* outs, std::vector<Box>* out_boxes) {
  using Tensor = typename B::Tensor;
  const LawUse& law = op.law;
  const auto pat = WithCoupled(op.sig, label_pat);
  std::vector<Box> in_boxes(law.inputs.size());
  std::vector<Tensor> pieces;
  for (size_t i = 0; i < law.inputs.size(); ++i) {
    if (!BoxFor(op.sig.inputs[i], law.inputs[i].shape, pat, &in_boxes[i])) return false;
    pieces.push_back(Slice(src[i], in_boxes[i]));
    const bool additive = std::find(op.sig.additive_inputs.begin(), op.sig.additive_inputs.end(),
                                    static_cast<int>(i)) != op.sig.additive_inputs.end();
    if (additive && !keep_additive) {
      for (auto& term : pieces.back().data) term = b.Zero();
    }
  }
  out_boxes->assign(op.out_types.size(), Box{});
  for (size_t k = 0; k < op.out_types.size(); ++k) {
    if (!BoxFor(op.sig.outputs[k], op.out_types[k].shape, pat, &(*out_boxes)[k])) return false;
  }
  ir::AttrMap attrs = law.attrs;
  if (op.schema.shard_attrs != nullptr) {
    auto a = op.schema.shard_attrs(law.attrs, law.inputs, in_boxes, op.out_types, *out_boxes);
    if (!a.ok()) return false;
    attrs = *std::move(a);
  }
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : pieces) ptrs.push_back(&t);
  auto r = b.Eval(law.kind, ptrs, attrs);
  if (!r.ok()) return false;
  *outs = *std::move(r);
  return true;
}

// Every sibling piece's outputs: on the whole inputs (additive inputs counted in
// the first sibling only), or, with partial operands, on their parts y and z,
// summed. Returns an unknown proof when a piece does not build.
template <class B>
std::optional<LawProof> SiblingOutputs(
    B& b, const LawOp& op, const std::vector<LabelIntervals>& siblings,
    const std::vector<typename B::Tensor>& whole_in, const std::vector<typename B::Tensor>& y_in,
    const std::vector<typename B::Tensor>& z_in,
    std::vector<std::vector<typename B::Tensor>>* piece_outs) {
  using Tensor = typename B::Tensor;
  std::vector<Box> boxes;
  for (size_t s = 0; s < siblings.size(); ++s) {
    std::vector<Tensor> outs;
    if (op.law.partial_inputs.empty()) {
      if (!RunPiece(b, op, siblings[s], whole_in, s == 0, &outs, &boxes)) {
        return Unknown("a sibling piece has no valid attributes or shapes");
      }
    } else {
      std::vector<Tensor> oy, oz;
      if (!RunPiece(b, op, siblings[s], y_in, true, &oy, &boxes) ||
          !RunPiece(b, op, siblings[s], z_in, true, &oz, &boxes)) {
        return Unknown("the piece has no valid attributes or shapes");
      }
      outs = oy;
      for (size_t k = 0; k < outs.size(); ++k) {
        for (size_t e = 0; e < outs[k].data.size(); ++e) {
          outs[k].data[e] = b.Add(oy[k].data[e], oz[k].data[e]);
        }
      }
    }
    piece_outs->push_back(std::move(outs));
  }
  return std::nullopt;
}

// The goals, output by output: the law's own piece against the whole op's
// output over its box, or, for an output that sums over a reduced label, the sum
// (or maximum) of every sibling's piece. Returns an unknown proof when shapes
// disagree.
template <class B>
std::optional<LawProof> OutputGoals(
    B& b, const LawOp& op, const LabelIntervals& at, const SplitReductions& reduced,
    const std::vector<LabelIntervals>& siblings, const std::vector<typename B::Tensor>& whole,
    const std::vector<std::vector<typename B::Tensor>>& piece_outs,
    std::vector<std::pair<typename B::Elem, typename B::Elem>>* goals_out) {
  using Tensor = typename B::Tensor;
  auto& goals = *goals_out;
  for (size_t k = 0; k < op.out_types.size(); ++k) {
    // Outputs that keep every reduced label as a dim are pieces of their own; one
    // that keeps some of them (attention_grad's dq keeps the queries, sums the keys)
    // sums the siblings that share the law's piece along those.
    bool sums = false;
    std::vector<std::string> kept;
    for (const std::string& l : reduced.labels) {
      const auto& ol = op.sig.outputs[k];
      if (std::find(ol.begin(), ol.end(), l) == ol.end()) {
        sums = true;
      } else {
        kept.push_back(l);
      }
    }
    auto shares_kept = [&](size_t sibling) {
      for (const std::string& l : kept) {
        if (siblings[sibling].at(l) != at.at(l)) return false;
      }
      return true;
    };
    Box box;
    if (!BoxFor(op.sig.outputs[k], op.out_types[k].shape, WithCoupled(op.sig, at), &box)) {
      return Unknown("output box");
    }
    const Tensor expect = Slice(whole[k], box);
    if (!sums) {
      // The law's own piece (sibling 0 is `at` when nothing is reduced).
      size_t self = 0;
      for (size_t s = 0; s < siblings.size(); ++s) {
        if (siblings[s] == at) self = s;
      }
      const Tensor& got = piece_outs[self][k];
      if (got.data.size() != expect.data.size()) return Unknown("piece shape differs");
      for (size_t e = 0; e < got.data.size(); ++e) goals.push_back({got.data[e], expect.data[e]});
      continue;
    }
    if (reduced.is_softmax) {
      // Output 0 holds rows of values, output 1 each row's log-sum-exp.
      if (op.out_types.size() != 2 || k > 1 || expect.shape.rank() < 1) {
        return Unknown("a softmax split without its value and log-sum-exp outputs");
      }
      const int64_t width = k == 0 ? expect.shape.dim(expect.shape.rank() - 1) : 1;
      for (size_t e = 0; e < expect.data.size(); ++e) {
        std::vector<typename B::Elem> values, lses;
        const size_t row = e / static_cast<size_t>(width);
        for (size_t sibling = 0; sibling < piece_outs.size(); ++sibling) {
          if (!shares_kept(sibling)) continue;
          const auto& outs = piece_outs[sibling];
          if (outs[k].data.size() != expect.data.size() || row >= outs[1].data.size()) {
            return Unknown("piece shape differs");
          }
          values.push_back(outs[k].data[e]);
          lses.push_back(outs[1].data[row]);
        }
        goals.push_back({k == 0 ? b.MergeValue(values, lses) : b.MergeLse(lses), expect.data[e]});
      }
      continue;
    }
    for (size_t e = 0; e < expect.data.size(); ++e) {
      std::vector<typename B::Elem> parts;
      for (size_t sibling = 0; sibling < piece_outs.size(); ++sibling) {
        if (!shares_kept(sibling)) continue;
        const auto& outs = piece_outs[sibling];
        if (outs[k].data.size() != expect.data.size()) return Unknown("piece shape differs");
        parts.push_back(outs[k].data[e]);
      }
      goals.push_back({reduced.is_max ? b.Max(parts) : b.Sum(parts), expect.data[e]});
    }
  }
  return std::nullopt;
}

// Builds the law's goals, pairs (pieces, whole op) element by element, with
// backend `b`: symbolic for a proof, reference kernels for a numeric check.
// Returns an unknown proof when the law's instance does not build.
template <class B>
std::optional<LawProof> BuildGoals(
    B& b, const LawUse& law,
    std::vector<std::pair<typename B::Elem, typename B::Elem>>* goals_out) {
  using Tensor = typename B::Tensor;
  const std::string kind = std::string(ir::OpKindName(law.kind));
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  auto sig = schema.signature(law.inputs, law.attrs);
  auto out_types = ir::InferOutputTypes(law.kind, law.inputs, law.attrs);
  if (!sig.ok() || !out_types.ok()) return Unknown("the op's signature or types do not build");
  const LawOp op{law, schema, *std::move(sig), *std::move(out_types)};
  std::vector<Tensor> whole_in;
  for (size_t i = 0; i < law.inputs.size(); ++i) {
    whole_in.push_back(b.Inputs(law.inputs[i], absl::StrCat("x", i)));
  }
  LabelIntervals at;
  for (size_t k = 0; k < law.labels.size(); ++k) {
    at[law.labels[k]] = {law.intervals[k], law.extents[k]};
  }
  const SplitReductions reduced = SplitReductionsOf(law, op.sig);
  std::optional<std::vector<LabelIntervals>> siblings = SiblingPieces(at, reduced.labels);
  if (!siblings.has_value()) return Unknown("an empty reduction chunk");
  DropUnseenPieces(law, at, &*siblings);
  // Partial operands: split them into y + z.
  std::vector<Tensor> y_in = whole_in, z_in = whole_in;
  for (int p : law.partial_inputs) {
    y_in[p] = b.Inputs(law.inputs[p], absl::StrCat("y", p));
    z_in[p] = b.Inputs(law.inputs[p], absl::StrCat("z", p));
    for (size_t e = 0; e < whole_in[p].data.size(); ++e) {
      whole_in[p].data[e] = b.Add(y_in[p].data[e], z_in[p].data[e]);
    }
  }
  std::vector<const Tensor*> whole_ptrs;
  for (const Tensor& t : whole_in) whole_ptrs.push_back(&t);
  auto whole = b.Eval(law.kind, whole_ptrs, law.attrs);
  if (!whole.ok()) return Unknown(absl::StrCat("'", kind, "': ", whole.status().message()));
  std::vector<std::vector<Tensor>> piece_outs;
  if (auto unknown = SiblingOutputs(b, op, *siblings, whole_in, y_in, z_in, &piece_outs)) {
    return unknown;
  }
  return OutputGoals(b, op, at, reduced, *siblings, *whole, piece_outs, goals_out);
}

}  // namespace

absl::StatusOr<ir::AttrMap> PieceAttrsAt(const LawUse& law, size_t k, ir::Interval moved) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  if (schema.shard_attrs == nullptr) return law.attrs;
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig, schema.signature(law.inputs, law.attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> out_types,
                        ir::InferOutputTypes(law.kind, law.inputs, law.attrs));
  return PieceAttrsAt(law, sig, out_types, k, moved);
}

absl::StatusOr<ir::AttrMap> PieceAttrsAt(const LawUse& law, const ir::DimSignature& sig,
                                         const std::vector<ir::TensorType>& out_types, size_t k,
                                         ir::Interval moved) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  if (schema.shard_attrs == nullptr) return law.attrs;
  std::map<std::string, std::pair<Interval, int64_t>> at;
  for (size_t j = 0; j < law.labels.size(); ++j) {
    at[law.labels[j]] = {j == k ? moved : law.intervals[j], law.extents[j]};
  }
  at = WithCoupled(sig, std::move(at));
  std::vector<Box> in_boxes(law.inputs.size()), out_boxes(out_types.size());
  for (size_t i = 0; i < law.inputs.size(); ++i) {
    if (i >= sig.inputs.size() || !BoxFor(sig.inputs[i], law.inputs[i].shape, at, &in_boxes[i])) {
      return absl::InvalidArgumentError("the piece's input boxes do not build");
    }
  }
  for (size_t o = 0; o < out_types.size(); ++o) {
    if (o >= sig.outputs.size() || !BoxFor(sig.outputs[o], out_types[o].shape, at, &out_boxes[o])) {
      return absl::InvalidArgumentError("the piece's output boxes do not build");
    }
  }
  return schema.shard_attrs(law.attrs, law.inputs, in_boxes, out_types, out_boxes);
}

std::string LawCacheKey(const LawUse& law) {
  return absl::StrCat("v", SemanticsVersion(law.kind), "|", law.key);
}

absl::StatusOr<int64_t> LawElements(const LawUse& law) {
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> out,
                        ir::InferOutputTypes(law.kind, law.inputs, law.attrs));
  int64_t n = 0;
  for (const auto& t : law.inputs) n += t.shape.num_elements();
  for (const auto& t : out) n += t.shape.num_elements();
  return n;
}

LawProof ProveLaw(const LawUse& law, unsigned timeout_ms) {
  const std::string kind = std::string(ir::OpKindName(law.kind));
  if (!HasSymbolicSemantics(law.kind)) {
    return Unknown(absl::StrCat("op '", kind, "' has no symbolic semantics"));
  }
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  auto out_types = ir::InferOutputTypes(law.kind, law.inputs, law.attrs);
  if (!out_types.ok()) return Unknown("the op's types do not build");

  // A piece covering the whole op with the op's own attributes is the op itself.
  const bool whole_piece =
      law.partial_inputs.empty() &&
      std::all_of(law.intervals.begin(), law.intervals.end(), [&](const Interval& iv) {
        const size_t k = &iv - law.intervals.data();
        return iv.begin == 0 && iv.end == law.extents[k];
      });
  if (whole_piece) {
    std::vector<Box> in_boxes, out_boxes;
    for (const auto& t : law.inputs) in_boxes.push_back(ir::FullBox(t.shape));
    for (const auto& t : *out_types) out_boxes.push_back(ir::FullBox(t.shape));
    auto attrs = schema.shard_attrs == nullptr
                     ? absl::StatusOr<ir::AttrMap>(law.attrs)
                     : schema.shard_attrs(law.attrs, law.inputs, in_boxes, *out_types, out_boxes);
    if (attrs.ok() && *attrs == law.attrs) return LawProof{smt::Verdict::kValid, "", 0};
  }
  const int64_t elements = LawElements(law).value_or(0);
  if (elements > kMaxLawElements) {
    return Unknown(absl::StrCat("law too large to prove at its real size: ", elements,
                                " elements (op '", kind, "', inputs and outputs; at most ",
                                kMaxLawElements, ")"));
  }

  smt::Terms terms;
  DefineSymbolicFunctions(terms);  // numeric meanings, for refuting by evaluation
  SymbolicBackend backend{terms};
  std::vector<std::pair<smt::TermId, smt::TermId>> pairs;
  if (auto unknown = BuildGoals(backend, law, &pairs)) return *std::move(unknown);
  std::vector<smt::Goal> goals;
  goals.reserve(pairs.size());
  for (const auto& [lhs, rhs] : pairs) goals.push_back({lhs, rhs});
  smt::SolverOptions options;
  options.timeout_ms = timeout_ms;
  smt::ProofResult r = smt::ProveEqual(terms, goals, options);
  LawProof proof;
  proof.verdict = r.verdict;
  proof.solver_calls = r.solver_calls;
  if (r.verdict == smt::Verdict::kInvalid) {
    proof.detail = absl::StrCat("element ", r.failed_goal, ": pieces give ", r.lhs_value,
                                ", the op gives ", r.rhs_value);
  } else if (r.verdict == smt::Verdict::kUnknown) {
    proof.detail = r.detail;
  }
  return proof;
}

absl::StatusOr<double> LawNumericGap(const LawUse& law, uint64_t seed) {
  NumericBackend backend{std::mt19937_64(seed)};
  std::vector<std::pair<double, double>> pairs;
  if (auto unknown = BuildGoals(backend, law, &pairs)) {
    return absl::FailedPreconditionError(unknown->detail);
  }
  double gap = 0;
  for (const auto& [lhs, rhs] : pairs) {
    if (!std::isfinite(lhs) && !std::isfinite(rhs)) continue;  // outside the domain
    const double diff = std::abs(lhs - rhs) / std::max(1.0, std::abs(rhs));
    if (!(diff <= gap)) gap = std::isnan(diff) ? INFINITY : diff;
  }
  return gap;
}

}  // namespace loom::verify
