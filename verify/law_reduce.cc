#include "verify/law_reduce.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "verify/law_resize.h"
#include "verify/laws.h"

namespace loom::verify {
namespace {

using ir::Interval;

bool IsFull(const Interval& iv, int64_t extent) { return iv.begin == 0 && iv.end == extent; }

bool ReduceLike(ir::DimKind kind) { return kind != ir::DimKind::kSpatial; }

int64_t LabelIndex(const LawUse& law, const std::string& label) {
  auto it = std::find(law.labels.begin(), law.labels.end(), label);
  return it == law.labels.end() ? -1 : it - law.labels.begin();
}

// A routing op's token and slot labels: units of whole groups, as many groups as
// the piece's pattern in groups needs, each group shrunk to kGroupTokens tokens
// and kGroupSlots slot columns (so its pairs compete for fewer slots than they
// are: some are dropped for some expert choices, and the law quantifies over
// every choice).
constexpr int64_t kGroupTokens = 2;
constexpr int64_t kGroupSlots = 1;

absl::Status ReduceRoutingExtents(const LawUse& law, const ir::DimSignature& sig,
                                  std::map<std::string, int64_t>* out) {
  const std::string t = TokenLabel(law, sig);
  const int64_t k = LabelIndex(law, t);
  if (k < 0) return absl::InvalidArgumentError("a routing law without its token label");
  LOOM_ASSIGN_OR_RETURN(int64_t groups, law.attrs.GetInt("groups", 1));
  const int64_t tokens = law.extents[k];
  if (groups < 1 || tokens % groups != 0) {
    return absl::InvalidArgumentError("tokens in unequal groups");
  }
  const int64_t group_tokens = tokens / groups;
  const Interval iv = law.intervals[k];
  if (iv.begin % group_tokens != 0 || iv.end % group_tokens != 0) {
    return absl::InvalidArgumentError("a routing piece that cuts a group");
  }
  const int64_t unit = std::gcd(std::gcd(iv.begin / group_tokens, iv.end / group_tokens), groups);
  const int64_t kept = groups / unit;
  (*out)[t] = kept * std::min(group_tokens, kGroupTokens);
  (*out)[kRoutingGroups] = kept;
  for (const auto& group : sig.coupled) {
    if (std::find(group.begin(), group.end(), t) == group.end()) continue;
    for (const std::string& l : group) {
      const int64_t c = LabelIndex(law, l);
      if (l == t) continue;
      if (c < 0) {
        // Slot columns only in the output (moe_dispatch): `capacity` per group.
        LOOM_ASSIGN_OR_RETURN(int64_t capacity, law.attrs.GetInt("capacity"));
        (*out)[l] = kept * std::min(capacity, kGroupSlots);
        continue;
      }
      if (law.extents[c] % groups != 0) return absl::InvalidArgumentError("uneven slot columns");
      const Interval cv = law.intervals[c];
      const int64_t slots = law.extents[c] / groups;
      if (cv.begin * group_tokens != iv.begin * slots || cv.end * group_tokens != iv.end * slots) {
        return absl::InvalidArgumentError("slot columns of other groups than the tokens'");
      }
      (*out)[l] = kept * std::min(slots, kGroupSlots);
    }
  }
  return absl::OkStatus();
}

// A routing law's groups cropped to the piece's groups and as many on either
// side (the first, an inner or the last piece): a group reads only its own tokens
// and indices and writes only its own slot columns, and a piece's position enters
// its attributes nowhere (`groups` counts its groups), so the law is one
// identical equation per group.
absl::StatusOr<LawUse> CropRoutingGroups(const LawUse& law) {
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig,
                        ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs));
  const std::string t = TokenLabel(law, sig);
  const int64_t k = LabelIndex(law, t);
  if (k < 0) return absl::InvalidArgumentError("a routing law without its token label");
  LOOM_ASSIGN_OR_RETURN(int64_t groups, law.attrs.GetInt("groups", 1));
  const int64_t tokens = law.extents[k];
  if (groups < 1 || tokens % groups != 0) return absl::InvalidArgumentError("unequal groups");
  const int64_t group_tokens = tokens / groups;
  const Interval iv = law.intervals[k];
  if (iv.begin % group_tokens != 0 || iv.end % group_tokens != 0 || iv.size() <= 0) {
    return absl::InvalidArgumentError("a routing piece that cuts a group");
  }
  const int64_t gb = iv.begin / group_tokens, ge = iv.end / group_tokens;
  const int64_t lo = std::max<int64_t>(0, gb - (ge - gb));
  const int64_t hi = std::min<int64_t>(groups, ge + (ge - gb));
  if (hi - lo >= groups) return law;
  // Every label coupled with the tokens (the slot columns) is cut at the same
  // groups; a dim carrying it must be the label itself.
  std::vector<size_t> cut = {static_cast<size_t>(k)};
  for (const auto& group : sig.coupled) {
    if (std::find(group.begin(), group.end(), t) == group.end()) continue;
    for (const std::string& l : group) {
      const int64_t c = LabelIndex(law, l);
      if (l != t && c >= 0) cut.push_back(static_cast<size_t>(c));
    }
  }
  LawUse out = law;
  for (size_t c : cut) {
    const int64_t e = law.extents[c];
    if (e % groups != 0) return absl::InvalidArgumentError("uneven slot columns");
    const int64_t per = e / groups;
    const Interval cv = law.intervals[c];
    if (cv.begin != gb * per || cv.end != ge * per) {
      return absl::InvalidArgumentError("slot columns of other groups than the tokens'");
    }
    const std::string& l = law.labels[c];
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      std::vector<int64_t> dims = out.inputs[i].shape.dims();
      for (size_t d = 0; d < sig.inputs[i].size() && d < dims.size(); ++d) {
        if (sig.inputs[i][d] != l) continue;
        if (law.inputs[i].shape.dim(static_cast<int>(d)) != e) {
          return absl::InvalidArgumentError("a dim carrying a part of a label");
        }
        dims[d] = (hi - lo) * per;
      }
      out.inputs[i].shape = ir::Shape(dims);
    }
    out.intervals[c] = Interval{(gb - lo) * per, (ge - lo) * per};
    out.extents[c] = (hi - lo) * per;
  }
  out.attrs.Set("groups", hi - lo);
  if (law.attrs.Has("tokens")) out.attrs.Set("tokens", (hi - lo) * group_tokens);
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature after,
                        ir::GetOpSchema(out.kind).signature(out.inputs, out.attrs));
  if (after.inputs != sig.inputs || after.outputs != sig.outputs || after.kinds != sig.kinds) {
    return absl::InvalidArgumentError("cropping relabels the op");
  }
  LOOM_RETURN_IF_ERROR(ir::InferOutputTypes(out.kind, out.inputs, out.attrs).status());
  out.key = LawKey(out);
  return out;
}

}  // namespace

bool ReducibleKind(ir::OpKind) { return true; }

std::set<std::string> SizeFixedLabels(const LawUse& law) {
  std::set<std::string> out;
  auto sig = ir::GetOpSchema(law.kind).signature(law.inputs, law.attrs);
  if (!sig.ok()) return out;
  if (law.kind == ir::OpKind::kReshape || law.kind == ir::OpKind::kExpand) {
    // A size-1 dim decides a reshape's grouping, and expand's input dim is 1.
    for (size_t k = 0; k < law.labels.size(); ++k) {
      if (law.extents[k] == 1) out.insert(law.labels[k]);
    }
    return out;
  }
  if (IsRouting(law.kind)) {
    // The k experts of each token (the last dim of the routing indices) and the
    // experts, whose count the indices address and `experts` fixes.
    for (size_t i = 0; i < sig->inputs.size() && i < law.inputs.size(); ++i) {
      if (sig->inputs[i].empty()) continue;
      if (!ir::IsFloat(law.inputs[i].dtype)) out.insert(sig->inputs[i].back());
      if (sig->inputs[i].size() == 3) out.insert(sig->inputs[i][0]);
    }
    return out;
  }
  if (law.kind != ir::OpKind::kTopKGate && law.kind != ir::OpKind::kTopKGateGrad) return out;
  // The k best of each row: the last dim of every input but the logits.
  for (size_t i = 1; i < sig->inputs.size(); ++i) {
    if (!sig->inputs[i].empty()) out.insert(sig->inputs[i].back());
  }
  return out;
}

absl::StatusOr<std::map<std::string, int64_t>> ReducedExtents(const LawUse& law) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig, schema.signature(law.inputs, law.attrs));
  auto kind_of = [&](const std::string& l) {
    auto it = sig.kinds.find(l);
    return it == sig.kinds.end() ? ir::DimKind::kFixed : it->second;
  };
  // The unit of label k: the largest width its piece bounds are multiples of.
  auto unit = [&](size_t k) {
    return std::gcd(std::gcd(law.intervals[k].begin, law.intervals[k].end), law.extents[k]);
  };
  auto width = [&](size_t k) -> int64_t { return ReduceLike(kind_of(law.labels[k])) ? 2 : 1; };
  std::map<std::string, int64_t> out;
  std::set<std::string> coupled_done;
  for (const auto& group : sig.coupled) {
    std::vector<size_t> members;
    for (const std::string& l : group) {
      const int64_t k = LabelIndex(law, l);
      if (k >= 0) members.push_back(static_cast<size_t>(k));
    }
    if (members.size() < 2) continue;
    int64_t common = 0;
    for (size_t k : members) common = std::gcd(common, unit(k));
    for (size_t k : members) {
      out[law.labels[k]] = law.extents[k] / common * std::min<int64_t>(width(k), common);
      coupled_done.insert(law.labels[k]);
    }
    // Attention's query heads h and key/value groups g: each group's heads are
    // independent instances reading the group's keys and values, summed into
    // the group's gradients; pieces take whole groups with all their heads. The
    // heads per group shrink to 2 (a sum of more than one term), which keeps
    // every piece's pattern in groups.
    if ((law.kind == ir::OpKind::kAttention || law.kind == ir::OpKind::kAttentionGrad) &&
        members.size() == 2) {
      const int64_t kh = LabelIndex(law, "h"), kg = LabelIndex(law, "g");
      if (kh >= 0 && kg >= 0 && law.extents[kh] % law.extents[kg] == 0) {
        const int64_t ratio = law.extents[kh] / law.extents[kg];
        const Interval h = law.intervals[kh], g = law.intervals[kg];
        if (ratio > 2 && h.begin == g.begin * ratio && h.end == g.end * ratio) {
          const int64_t gu = std::gcd(std::gcd(g.begin, g.end), law.extents[kg]);
          out["g"] = law.extents[kg] / gu;
          out["h"] = out["g"] * 2;
        }
      }
    }
  }
  for (size_t k = 0; k < law.labels.size(); ++k) {
    const std::string& l = law.labels[k];
    if (coupled_done.count(l) > 0) continue;
    const int64_t e = law.extents[k];
    if (IsFull(law.intervals[k], e)) {
      out[l] = ReduceLike(kind_of(l)) ? std::min<int64_t>(e, 2) : std::min<int64_t>(e, 1);
    } else {
      const int64_t g = unit(k);
      out[l] = e / g * std::min<int64_t>(width(k), g);
    }
  }
  // A causal op's queries and keys (attention's): which (query, key) pairs a piece
  // holds depends on their positions together, so both shrink by one common unit,
  // each unit two positions wide (a block on the diagonal keeps its triangle).
  if (const std::optional<int64_t> shift = ir::CausalShift(schema, law.attrs)) {
    const int64_t ks = LabelIndex(law, schema.causal_mask->queries);
    const int64_t kt = LabelIndex(law, schema.causal_mask->keys);
    if (ks >= 0 && kt >= 0 && (!IsFull(law.intervals[ks], law.extents[ks]) ||
                               !IsFull(law.intervals[kt], law.extents[kt]))) {
      if (law.attrs.Has("q_offset") || law.attrs.Has("k_offset")) {
        return absl::InvalidArgumentError("a causal op placed at an offset");
      }
      int64_t g = 0;
      for (int64_t k : {ks, kt}) {
        g = std::gcd(g, std::gcd(std::gcd(law.intervals[k].begin, law.intervals[k].end),
                                 law.extents[k]));
      }
      for (int64_t k : {ks, kt}) {
        out[law.labels[k]] = law.extents[k] / g * std::min<int64_t>(2, g);
      }
    }
  }
  // A dim an input is broadcast along keeps two positions (at one, the broadcast
  // input would read as the dim's own and the signature would change).
  for (const auto& [from, along] : sig.broadcasts) {
    const int64_t k = LabelIndex(law, along);
    if (k < 0 || out[along] >= 2 || law.extents[k] < 2) continue;
    const int64_t g = unit(static_cast<size_t>(k));
    out[along] = law.extents[k] / g * std::min<int64_t>(2, g);
  }
  // Op-specific sizes and floors.
  LOOM_RETURN_IF_ERROR(ReduceSizeLabels(law, sig, &out));
  if (IsRouting(law.kind)) LOOM_RETURN_IF_ERROR(ReduceRoutingExtents(law, sig, &out));
  for (const std::string& l : SizeFixedLabels(law)) {
    const int64_t k = LabelIndex(law, l);
    if (k >= 0) out[l] = law.extents[k];
  }
  if (law.kind == ir::OpKind::kTopKGate || law.kind == ir::OpKind::kTopKGateGrad) {
    LOOM_ASSIGN_OR_RETURN(int64_t k_best, law.attrs.GetInt("k"));
    if (!sig.inputs.empty() && !sig.inputs[0].empty()) {
      const int64_t k = LabelIndex(law, sig.inputs[0].back());
      if (k >= 0) {
        const int64_t floor = std::min(law.extents[k], k_best + 1);
        int64_t& e = out[law.labels[k]];
        if (e < floor) {
          if (!IsFull(law.intervals[k], law.extents[k])) {
            return absl::InvalidArgumentError("a split expert axis below the top-k floor");
          }
          e = floor;
        }
      }
    }
  }
  return out;
}

absl::StatusOr<LawUse> CropSpatialLabels(const LawUse& law) {
  const ir::OpSchema& schema = ir::GetOpSchema(law.kind);
  // A piece's position along a label reaches its kernel only through piece
  // attributes: a label is cropped only where they are the same at every
  // position of the piece along it (kinds without any see every position alike).
  if (IsRouting(law.kind)) return law;  // groups: CropRoutingGroups
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature sig, schema.signature(law.inputs, law.attrs));
  absl::StatusOr<std::vector<ir::TensorType>> out_types =
      ir::InferOutputTypes(law.kind, law.inputs, law.attrs);
  if (!out_types.ok()) return law;
  absl::StatusOr<ir::AttrMap> own = PieceAttrsAt(
      law, sig, *out_types, 0, law.intervals.empty() ? Interval{} : law.intervals[0]);
  if (!own.ok()) return law;
  auto blind = [&](size_t k) {
    if (schema.shard_attrs == nullptr) return true;
    const Interval iv = law.intervals[k];
    const int64_t w = iv.size();
    if (w <= 0 || iv.begin % w != 0 || law.extents[k] % w != 0) return false;
    for (int64_t b = 0; b < law.extents[k]; b += w) {
      auto a = PieceAttrsAt(law, sig, *out_types, k, Interval{b, b + w});
      if (!a.ok() || !(*a == *own)) return false;
    }
    return true;
  };
  std::set<std::string> coupled;
  for (const auto& group : sig.coupled) coupled.insert(group.begin(), group.end());
  const std::set<std::string> fixed_size = SizeFixedLabels(law);
  LawUse out = law;
  bool changed = false;
  // Whether label l can be cropped: spatial or a split reduction (its chunks are
  // sums of alike terms, and the crop keeps whole chunks), free in size, and every
  // dim carrying it is the label itself (no output-only use).
  auto croppable = [&](size_t k) {
    const std::string& l = law.labels[k];
    auto kind = sig.kinds.find(l);
    if (kind == sig.kinds.end() || kind->second == ir::DimKind::kFixed) return false;
    if (kind->second != ir::DimKind::kSpatial && law.intervals[k].size() > 0 &&
        law.intervals[k].begin % law.intervals[k].size() != 0) {
      return false;
    }
    if (fixed_size.count(l) > 0) return false;
    const int64_t e = law.extents[k];
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      for (size_t d = 0; d < sig.inputs[i].size(); ++d) {
        if (sig.inputs[i][d] == l && law.inputs[i].shape.dim(static_cast<int>(d)) != e) {
          return false;
        }
      }
    }
    return law.intervals[k].size() > 0 && blind(k);
  };
  // The piece and one piece of its width on each side, within the label.
  auto window = [&](size_t k) {
    const Interval iv = law.intervals[k];
    return Interval{std::max<int64_t>(0, iv.begin - iv.size()),
                    std::min<int64_t>(law.extents[k], iv.end + iv.size())};
  };
  auto crop = [&](size_t k, Interval w) {
    const std::string& l = law.labels[k];
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      std::vector<int64_t> dims = out.inputs[i].shape.dims();
      for (size_t d = 0; d < sig.inputs[i].size() && d < dims.size(); ++d) {
        if (sig.inputs[i][d] == l) dims[d] = w.size();
      }
      out.inputs[i].shape = ir::Shape(dims);
    }
    out.intervals[k] = Interval{law.intervals[k].begin - w.begin, law.intervals[k].end - w.begin};
    out.extents[k] = w.size();
    changed = true;
  };
  for (size_t k = 0; k < law.labels.size(); ++k) {
    if (coupled.count(law.labels[k]) > 0 || !croppable(k)) continue;
    const Interval w = window(k);
    if (w.size() < law.extents[k]) crop(k, w);
  }
  // Coupled labels (grouped-query heads and their key/value groups) are cropped
  // together, to the same fraction of each, which keeps their ratio: the piece's
  // units of every label of the group, and one unit of each on either side.
  for (const auto& group : sig.coupled) {
    std::vector<size_t> members;
    bool ok = true;
    for (const std::string& l : group) {
      const int64_t k = LabelIndex(law, l);
      if (k < 0) continue;
      members.push_back(static_cast<size_t>(k));
      ok = ok && croppable(static_cast<size_t>(k));
    }
    if (!ok || members.size() < 2) continue;
    const size_t a = members[0];
    const Interval wa = window(a);
    if (wa.size() >= law.extents[a]) continue;
    for (size_t k : members) {
      const Interval w = window(k);
      // The same fraction of every label: bounds in proportion to the extents.
      ok = ok && w.begin * law.extents[a] == wa.begin * law.extents[k] &&
           w.end * law.extents[a] == wa.end * law.extents[k] &&
           law.intervals[k].begin * law.extents[a] == law.intervals[a].begin * law.extents[k] &&
           law.intervals[k].end * law.extents[a] == law.intervals[a].end * law.extents[k];
    }
    if (!ok) continue;
    for (size_t k : members) crop(k, window(k));
  }
  if (!changed) return law;
  if (law.kind == ir::OpKind::kReshape) {
    // The output follows the cropped rows: each group's leading dim is solved
    // again from its input dims.
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          ir::ReshapeShape(sig, (*out_types)[0].shape, out.inputs[0].shape, {}));
    out.attrs.Set("shape", shape);
  }
  LOOM_ASSIGN_OR_RETURN(ir::DimSignature after, schema.signature(out.inputs, out.attrs));
  if (after.inputs != sig.inputs || after.outputs != sig.outputs || after.kinds != sig.kinds) {
    return absl::InvalidArgumentError("cropping relabels the op");
  }
  LOOM_RETURN_IF_ERROR(ir::InferOutputTypes(out.kind, out.inputs, out.attrs).status());
  out.key = LawKey(out);
  return out;
}

LawUse ReduceLaw(const LawUse& law) {
  if (!ReducibleKind(law.kind)) return law;
  auto extents = ReducedExtents(law);
  if (!extents.ok()) return law;
  auto reduced = ResizeLaw(law, *extents);
  if (!reduced.ok()) return law;
  if (auto cropped = CropSpatialLabels(*reduced); cropped.ok()) reduced = *std::move(cropped);
  if (IsRouting(reduced->kind)) {
    if (auto cropped = CropRoutingGroups(*reduced); cropped.ok()) reduced = *std::move(cropped);
  }
  int64_t before = 0, after = 0;
  for (const auto& t : law.inputs) before += t.shape.num_elements();
  for (const auto& t : reduced->inputs) after += t.shape.num_elements();
  if (after > before) return law;
  return *std::move(reduced);
}

}  // namespace loom::verify
