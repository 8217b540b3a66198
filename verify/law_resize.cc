#include "verify/law_resize.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::verify {
namespace {

int64_t LabelIndex(const LawUse& law, const std::string& label) {
  auto it = std::find(law.labels.begin(), law.labels.end(), label);
  return it == law.labels.end() ? -1 : it - law.labels.begin();
}

// b * to / from, when exact.
absl::StatusOr<int64_t> Scale(int64_t b, int64_t to, int64_t from, const std::string& what) {
  if (from <= 0 || (b * to) % from != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", b, " does not scale exactly from ", from, " to ", to));
  }
  return b * to / from;
}

std::set<std::string> InputLabels(const ir::DimSignature& sig) {
  std::set<std::string> out;
  for (const auto& labels : sig.inputs) out.insert(labels.begin(), labels.end());
  return out;
}

// The attributes that are positions along the op's `dim` (a list for split), as
// its schema declares them.
struct PositionNames {
  std::vector<std::string> scalars;
  std::string list;
};

PositionNames PositionAttrNames(ir::OpKind kind) {
  PositionNames names;
  for (const ir::AttrUse& a : ir::GetOpSchema(kind).attr_roles) {
    if (a.role == ir::AttrRole::kPosition) names.scalars.push_back(a.name);
    if (a.role == ir::AttrRole::kPositions) names.list = a.name;
  }
  return names;
}

bool HasOffset(ir::OpKind kind, const ir::AttrMap& attrs, std::string* name) {
  for (const ir::AttrUse& a : ir::GetOpSchema(kind).attr_roles) {
    if (a.role == ir::AttrRole::kOffset && attrs.Has(a.name)) {
      *name = a.name;
      return true;
    }
  }
  return false;
}

// The label of input 0's `dim`.
absl::StatusOr<std::string> DimLabel(const LawUse& law, const ir::DimSignature& sig) {
  LOOM_ASSIGN_OR_RETURN(int64_t raw, law.attrs.GetInt("dim"));
  LOOM_RET_CHECK(!law.inputs.empty() && !sig.inputs.empty()) << "no input to take a dim of";
  LOOM_ASSIGN_OR_RETURN(int dim, ir::NormalizeDim(raw, law.inputs[0].shape.rank()));
  LOOM_RET_CHECK(static_cast<size_t>(dim) < sig.inputs[0].size()) << "dim " << dim;
  return sig.inputs[0][dim];
}


// The law's attributes at the new sizes: `out` holds the new intervals, extents
// and input shapes.
absl::StatusOr<ir::AttrMap> ResizeAttrs(const LawUse& law, const ir::DimSignature& sig,
                                        const std::vector<ir::TensorType>& old_out,
                                        const LawUse& out,
                                        const std::map<std::string, int64_t>& free_sizes) {
  ir::AttrMap attrs = law.attrs;
  if (const ir::ResizeAttrsFn resize = ir::GetOpSchema(law.kind).resize_attrs) {
    LOOM_ASSIGN_OR_RETURN(attrs, resize(law.attrs, sig, old_out, out.inputs, free_sizes));
  }
  const PositionNames names = PositionAttrNames(law.kind);
  if (!names.scalars.empty() || !names.list.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::string label, DimLabel(law, sig));
    const int64_t k = LabelIndex(law, label);
    LOOM_RET_CHECK(k >= 0) << "label " << label << " of the op's dim is not the law's";
    for (const std::string& name : names.scalars) {
      LOOM_ASSIGN_OR_RETURN(int64_t v, law.attrs.GetInt(name));
      LOOM_ASSIGN_OR_RETURN(v, Scale(v, out.extents[k], law.extents[k], name));
      attrs.Set(name, v);
    }
    if (!names.list.empty()) {
      LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> vs, law.attrs.GetInts(names.list));
      for (int64_t& v : vs) {
        LOOM_ASSIGN_OR_RETURN(v, Scale(v, out.extents[k], law.extents[k], names.list));
      }
      attrs.Set(names.list, vs);
    }
  }
  return attrs;
}

// A routing op's size attributes at new sizes. Its groups keep their tokens, so
// `groups` (and moe_dispatch_grad's `tokens`) scale with the token label, unless
// `extents` names the new group count (kRoutingGroups): then the groups are
// resized, and moe_dispatch's and moe_dispatch_grad's `capacity` becomes the slot
// columns per group.
absl::StatusOr<ir::AttrMap> ResizeRoutingAttrs(const LawUse& law, const ir::DimSignature& sig,
                                               const std::map<std::string, int64_t>& extents) {
  const std::string t = TokenLabel(law, sig);
  const int64_t k = LabelIndex(law, t);
  if (k < 0) return absl::InvalidArgumentError("a routing law without its token label");
  const int64_t from = law.extents[k], to = extents.at(t);
  ir::AttrMap attrs = law.attrs;
  LOOM_ASSIGN_OR_RETURN(int64_t groups, law.attrs.GetInt("groups", 1));
  auto named = extents.find(kRoutingGroups);
  if (named != extents.end()) {
    const int64_t g = named->second;
    if (g <= 0 || to % g != 0) return absl::InvalidArgumentError("tokens in unequal groups");
    attrs.Set("groups", g);
    if (law.attrs.Has("tokens")) attrs.Set("tokens", to);
    if (law.attrs.Has("capacity")) {
      // The slot columns: the label coupled with the tokens.
      for (const auto& group : sig.coupled) {
        if (std::find(group.begin(), group.end(), t) == group.end()) continue;
        for (const std::string& l : group) {
          if (l == t || extents.count(l) == 0) continue;
          if (extents.at(l) % g != 0) return absl::InvalidArgumentError("uneven slot columns");
          attrs.Set("capacity", extents.at(l) / g);
        }
      }
    }
    return attrs;
  }
  LOOM_ASSIGN_OR_RETURN(int64_t scaled, Scale(groups, to, from, "attribute 'groups'"));
  attrs.Set("groups", scaled);
  if (law.attrs.Has("tokens")) {
    LOOM_ASSIGN_OR_RETURN(int64_t tokens, law.attrs.GetInt("tokens"));
    LOOM_ASSIGN_OR_RETURN(int64_t scaled_tokens, Scale(tokens, to, from, "attribute 'tokens'"));
    attrs.Set("tokens", scaled_tokens);
  }
  return attrs;
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> FreeOutputLabels(const LawUse& law,
                                                               const ir::DimSignature& sig) {
  std::map<std::string, int64_t> out;
  if (ir::GetOpSchema(law.kind).resize_attrs == nullptr) return out;
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> types,
                        ir::InferOutputTypes(law.kind, law.inputs, law.attrs));
  const std::set<std::string> inputs = InputLabels(sig);
  for (size_t k = 0; k < sig.outputs.size() && k < types.size(); ++k) {
    for (size_t d = 0; d < sig.outputs[k].size(); ++d) {
      const std::string& l = sig.outputs[k][d];
      const int64_t size = types[k].shape.dim(static_cast<int>(d));
      // A reshape's size-1 dims decide its grouping: they stay 1.
      if (law.kind == ir::OpKind::kReshape && size == 1) continue;
      if (inputs.count(l) == 0) out[l] = size;
    }
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::vector<int64_t>>> PositionAttrs(
    const LawUse& law, const ir::DimSignature& sig) {
  std::map<std::string, std::vector<int64_t>> out;
  const PositionNames names = PositionAttrNames(law.kind);
  if (names.scalars.empty() && names.list.empty()) return out;
  LOOM_ASSIGN_OR_RETURN(std::string label, DimLabel(law, sig));
  std::vector<int64_t>& values = out[label];
  for (const std::string& name : names.scalars) {
    LOOM_ASSIGN_OR_RETURN(int64_t v, law.attrs.GetInt(name));
    values.push_back(v);
  }
  if (!names.list.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> vs, law.attrs.GetInts(names.list));
    values.insert(values.end(), vs.begin(), vs.end());
  }
  return out;
}

absl::Status ReduceSizeLabels(const LawUse& law, const ir::DimSignature& sig,
                              std::map<std::string, int64_t>* out) {
  // Positions along a label: units of the gcd of the positions, the piece's
  // bounds and the extent, one element each.
  LOOM_ASSIGN_OR_RETURN(auto positions, PositionAttrs(law, sig));
  for (const auto& [label, values] : positions) {
    const int64_t k = LabelIndex(law, label);
    if (k < 0) continue;
    int64_t g = std::gcd(std::gcd(law.intervals[k].begin, law.intervals[k].end), law.extents[k]);
    for (int64_t v : values) g = std::gcd(g, v);
    (*out)[label] = law.extents[k] / g;
  }
  LOOM_ASSIGN_OR_RETURN(auto free, FreeOutputLabels(law, sig));
  for (const auto& [label, size] : free) (*out)[label] = std::min<int64_t>(size, 2);
  if (law.kind != ir::OpKind::kReshape) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> out_types,
                        ir::InferOutputTypes(law.kind, law.inputs, law.attrs));
  int64_t unit_in = 0, unit_out = 0;
  for (int64_t d : law.inputs[0].shape.dims()) unit_in += d == 1 ? 1 : 0;
  for (int64_t d : out_types[0].shape.dims()) unit_out += d == 1 ? 1 : 0;
  const bool unit_dims = unit_in != unit_out;
  // Each group: the leading label's units times the factor that lets the two
  // sides' other dims (products X and Y) divide the group evenly.
  for (const ir::ReshapeGroup& g : ir::ReshapeGroups(sig)) {
    int64_t x = 1, y = 1;
    // A dim the map does not list (a size-1 output dim) keeps its size.
    auto size = [&](const std::string& l, int64_t own) -> int64_t {
      auto it = out->find(l);
      return it == out->end() ? own : it->second;
    };
    for (int i : g.in_rest) x *= size(sig.inputs[0][i], law.inputs[0].shape.dim(i));
    for (int j : g.out_rest) y *= size(sig.outputs[0][j], out_types[0].shape.dim(j));
    const int64_t lead = size(g.label, law.inputs[0].shape.dim(g.in_lead));
    // In a group with other dims, leading dims above 1 stay above 1, or the
    // grouping would change (a size-1 dim joins a neighbour group); so do all
    // where the reshape adds or drops size-1 dims, which a neighbour of size 1
    // could otherwise take for its own.
    const bool alone = x == 1 && y == 1 && !unit_dims;
    const int64_t in_floor =
        alone ? 1 : std::min<int64_t>(law.inputs[0].shape.dim(g.in_lead), 2);
    const int64_t out_floor =
        alone ? 1 : std::min<int64_t>(out_types[0].shape.dim(g.out_lead), 2);
    int64_t m = 1;
    while (lead * (y / std::gcd(x, y)) * m < in_floor ||
           lead * (x / std::gcd(x, y)) * m < out_floor) {
      m *= 2;
    }
    (*out)[g.label] = lead * (y / std::gcd(x, y)) * m;
  }
  return absl::OkStatus();
}

bool IsRouting(ir::OpKind kind) { return ir::GetOpSchema(kind).routes_tokens; }

// The token label of a routing op: dim 0 of its integer routing indices.
std::string TokenLabel(const LawUse& law, const ir::DimSignature& sig) {
  for (size_t i = 0; i < law.inputs.size() && i < sig.inputs.size(); ++i) {
    if (!ir::IsFloat(law.inputs[i].dtype) && !sig.inputs[i].empty()) return sig.inputs[i][0];
  }
  return "";
}

absl::StatusOr<LawUse> ResizeLaw(const LawUse& law,
                                 const std::map<std::string, int64_t>& extents) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig, schema.signature(law.inputs, law.attrs));
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> old_out,
                        ir::InferOutputTypes(law.kind, law.inputs, law.attrs));
  LawUse out = law;
  for (size_t k = 0; k < law.labels.size(); ++k) {
    auto it = extents.find(law.labels[k]);
    if (it == extents.end() || it->second <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("no extent for label ", law.labels[k]));
    }
    const int64_t from = law.extents[k], to = it->second;
    LOOM_ASSIGN_OR_RETURN(out.intervals[k].begin,
                          Scale(law.intervals[k].begin, to, from, "bound"));
    LOOM_ASSIGN_OR_RETURN(out.intervals[k].end, Scale(law.intervals[k].end, to, from, "bound"));
    out.extents[k] = to;
  }
  for (size_t i = 0; i < law.inputs.size(); ++i) {
    const ir::Shape& shape = law.inputs[i].shape;
    std::vector<int64_t> dims;
    for (int d = 0; d < shape.rank(); ++d) {
      const int64_t k = i < sig.inputs.size() && static_cast<size_t>(d) < sig.inputs[i].size()
                            ? LabelIndex(law, sig.inputs[i][d])
                            : -1;
      if (k < 0) {
        dims.push_back(shape.dim(d));
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(int64_t dim,
                            Scale(shape.dim(d), out.extents[k], law.extents[k], "dim"));
      dims.push_back(dim);
    }
    out.inputs[i].shape = ir::Shape(dims);
  }
  // Free output labels: listed sizes, else their own.
  LOOM_ASSIGN_OR_RETURN(auto free, FreeOutputLabels(law, sig));
  const std::map<std::string, int64_t> old_free = free;
  for (auto& [label, size] : free) {
    auto it = extents.find(label);
    if (it != extents.end()) size = it->second;
    if (size <= 0) return absl::InvalidArgumentError(absl::StrCat("size ", size, " of ", label));
  }
  if (std::string offset; HasOffset(law.kind, law.attrs, &offset)) {
    // The logical op addresses a range (of a vocabulary) by position: resized only
    // when the range starts at 0.
    LOOM_ASSIGN_OR_RETURN(int64_t begin, law.attrs.GetInt(offset));
    bool changes = out.extents != law.extents;
    for (const auto& [label, size] : free) changes = changes || size != old_free.find(label)->second;
    if (begin != 0 && changes) {
      return absl::InvalidArgumentError("the op's vocabulary offset depends on sizes");
    }
  }
  LOOM_ASSIGN_OR_RETURN(out.attrs, ResizeAttrs(law, sig, old_out, out, free));
  if (IsRouting(law.kind)) {
    LOOM_ASSIGN_OR_RETURN(out.attrs, ResizeRoutingAttrs(law, sig, extents));
  }

  // The same labels on every dim, and every output dim where the labels put it.
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature new_sig, schema.signature(out.inputs, out.attrs));
  if (new_sig.inputs != sig.inputs || new_sig.outputs != sig.outputs) {
    return absl::InvalidArgumentError(absl::StrCat("the signature changes at the new sizes: ",
                                                   new_sig.ToString(), " for ", sig.ToString()));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<ir::TensorType> new_out,
                        ir::InferOutputTypes(out.kind, out.inputs, out.attrs));
  for (size_t k = 0; k < new_out.size() && k < sig.outputs.size(); ++k) {
    for (size_t d = 0; d < sig.outputs[k].size(); ++d) {
      const std::string& l = sig.outputs[k][d];
      const int64_t got = new_out[k].shape.dim(static_cast<int>(d));
      int64_t want = got;
      const int64_t li = LabelIndex(law, l);
      if (free.count(l) > 0) {
        want = free[l];
      } else if (li >= 0 && law.kind != ir::OpKind::kReshape) {
        LOOM_ASSIGN_OR_RETURN(want, Scale(old_out[k].shape.dim(static_cast<int>(d)),
                                          out.extents[li], law.extents[li], "output dim"));
      }
      if (got != want) {
        return absl::InvalidArgumentError(absl::StrCat("output ", k, " dim ", d, " (label ", l,
                                                       ") is ", got, ", expected ", want));
      }
    }
  }
  out.key = LawKey(out);
  return out;
}

}  // namespace loom::verify
