#include "verify/contrib.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::verify {
namespace {

int64_t Volume(const ir::Box& box) {
  int64_t v = 1;
  for (const ir::Interval& iv : box) v *= iv.size();
  return v;
}

bool Overlap(const ir::Box& a, const ir::Box& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (std::max(a[d].begin, b[d].begin) >= std::min(a[d].end, b[d].end)) return false;
  }
  return true;
}

bool BoxLess(const ir::Box& a, const ir::Box& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].begin != b[i].begin) return a[i].begin < b[i].begin;
    if (a[i].end != b[i].end) return a[i].end < b[i].end;
  }
  return a.size() < b.size();
}

// Merges boxes that differ in one dim only and touch there, until none do.
void Coalesce(std::vector<ir::Box>& boxes) {
  bool merged = true;
  while (merged && boxes.size() > 1) {
    merged = false;
    std::sort(boxes.begin(), boxes.end(), BoxLess);
    for (size_t i = 0; i < boxes.size() && !merged; ++i) {
      for (size_t j = i + 1; j < boxes.size() && !merged; ++j) {
        int diff = -1;
        bool ok = true;
        for (size_t d = 0; d < boxes[i].size(); ++d) {
          if (boxes[i][d] == boxes[j][d]) continue;
          if (diff >= 0) { ok = false; break; }
          diff = static_cast<int>(d);
        }
        if (!ok || diff < 0) continue;
        ir::Interval& a = boxes[i][diff];
        const ir::Interval& b = boxes[j][diff];
        if (a.end == b.begin || b.end == a.begin) {
          a = ir::Interval{std::min(a.begin, b.begin), std::max(a.end, b.end)};
          boxes.erase(boxes.begin() + static_cast<std::ptrdiff_t>(j));
          merged = true;
        }
      }
    }
  }
  std::sort(boxes.begin(), boxes.end(), BoxLess);
}

// The interning key of a contribution: its fields as raw bytes (cheap to build;
// never shown).
template <typename T>
void Put(std::string& key, T x) {
  key.append(reinterpret_cast<const char*>(&x), sizeof(x));
}

std::string Key(const Contrib& c) {
  std::string k;
  Put(k, static_cast<char>(c.kind));
  switch (c.kind) {
    case Contrib::kFull:
    case Contrib::kZero:
    case Contrib::kBad:
      return k;
    case Contrib::kRed: {
      Put(k, c.family);
      Put(k, static_cast<int32_t>(c.chunks.size()));
      for (const ir::Box& b : c.chunks) {
        Put(k, static_cast<int32_t>(b.size()));
        for (const ir::Interval& iv : b) {
          Put(k, iv.begin);
          Put(k, iv.end);
        }
      }
      for (int a : c.additive) Put(k, a);
      return k;
    }
    case Contrib::kLin:
      Put(k, c.desc);
      for (ContribId p : c.parts) Put(k, p);
      return k;
    case Contrib::kScaled:
      Put(k, c.base);
      Put(k, c.factor.num);
      Put(k, c.factor.den);
      return k;
    case Contrib::kShare:
      Put(k, c.even);
      Put(k, c.tensor);
      for (const ir::Interval& iv : c.chunks[0]) {
        Put(k, iv.begin);
        Put(k, iv.end);
      }
      for (const ir::ValuePart::Piece& piece : c.part.pieces()) {
        Put(k, piece.lo.num);
        Put(k, piece.lo.den);
        Put(k, piece.hi.num);
        Put(k, piece.hi.den);
      }
      return k;
  }
  return k;
}

// The length of a value part, a fraction of the whole ("0.5").
std::string PartLength(const ir::ValuePart& part) {
  double total = 0;
  for (const ir::ValuePart::Piece& p : part.pieces()) {
    total += static_cast<double>(p.hi.num) / static_cast<double>(p.hi.den) -
             static_cast<double>(p.lo.num) / static_cast<double>(p.lo.den);
  }
  return absl::StrCat(total);
}

ContribStore::SumResult Failed(FailureClass cls, std::string message,
                               std::string counterexample) {
  ContribStore::SumResult r;
  r.ok = false;
  r.cls = cls;
  r.message = std::move(message);
  r.counterexample = std::move(counterexample);
  return r;
}

int64_t Product(const std::vector<int64_t>& extents) {
  int64_t total = 1;
  for (int64_t e : extents) total *= e;
  return total;
}

// Row-major index, in the reduction's index space, of a chunk's last term.
int64_t LastIndex(const ir::Box& chunk, const std::vector<int64_t>& extents) {
  int64_t index = 0;
  for (size_t i = 0; i < chunk.size() && i < extents.size(); ++i) {
    index = index * extents[i] + (chunk[i].end - 1);
  }
  return index;
}

std::string Chunks(const std::vector<ir::Box>& chunks) {
  std::vector<std::string> out;
  for (const ir::Box& b : chunks) out.push_back(ir::BoxToString(b));
  return absl::StrCat(chunks.size() == 1 ? "chunk " : "chunks ", absl::StrJoin(out, "+"));
}

// "sum", "maximum", "softmax": what a reduction of `op` is.
const char* ReductionNoun(ir::ReduceOp op) {
  switch (op) {
    case ir::ReduceOp::kMax: return "maximum";
    case ir::ReduceOp::kLogSumExp: return "softmax";
    default: return "sum";
  }
}

// "the sum over k (32 terms)"
std::string Space(const Family& f) {
  return absl::StrCat("the ", ReductionNoun(f.reduce), " over ", absl::StrJoin(f.labels, ","),
                      " (", Product(f.extents), " terms)");
}

}  // namespace

ContribStore::ContribStore() {
  for (Contrib::Kind k : {Contrib::kFull, Contrib::kZero, Contrib::kBad}) {
    Contrib c;
    c.kind = k;
    Intern(std::move(c));
  }
}

ContribId ContribStore::Intern(Contrib c) {
  std::string key = Key(c);
  auto it = contrib_ids_.find(key);
  if (it != contrib_ids_.end()) return it->second;
  const ContribId id = static_cast<ContribId>(contribs_.size());
  contribs_.push_back(std::move(c));
  contrib_ids_.emplace(std::move(key), id);
  return id;
}

int ContribStore::InternFamily(Family family) {
  auto it = family_ids_.find(family.key);
  if (it != family_ids_.end()) return it->second;
  const int id = static_cast<int>(families_.size());
  family_ids_.emplace(family.key, id);
  families_.push_back(std::move(family));
  return id;
}

int ContribStore::InternDesc(ir::OpId op, int output, const std::string& shape,
                             std::vector<ir::Interval> bounds, const std::string& what,
                             std::vector<std::string> operands) {
  std::string key = absl::StrCat(op, "/", output, "/", shape, "/");
  for (const ir::Interval& iv : bounds) absl::StrAppend(&key, iv.begin, ":", iv.end, ";");
  auto it = desc_ids_.find(key);
  if (it != desc_ids_.end()) return it->second;
  const int id = static_cast<int>(descs_.size());
  desc_ids_.emplace(std::move(key), id);
  descs_.push_back({op, output, shape, std::move(bounds), what, std::move(operands)});
  return id;
}

namespace {
// "<op>/<rest>" with the op replaced.
std::string Rekey(const std::string& key, ir::OpId op) {
  const size_t slash = key.find('/');
  return absl::StrCat(op, slash == std::string::npos ? std::string("/") : key.substr(slash));
}
}  // namespace

ContribId ContribStore::MapOps(ContribId id, const std::function<ir::OpId(ir::OpId)>& map,
                               const std::function<std::string(ir::OpId, int)>& name,
                               const std::function<ir::TensorId(ir::TensorId)>& map_tensor,
                               const std::function<std::string(ir::TensorId)>& tensor_name) {
  const Contrib c = contribs_[id];  // a copy: interning below may grow the store
  switch (c.kind) {
    case Contrib::kFull:
    case Contrib::kZero:
    case Contrib::kBad:
      return id;
    case Contrib::kScaled: {
      const ContribId base = MapOps(c.base, map, name, map_tensor, tensor_name);
      return base == c.base ? id : Scaled(base, c.factor);
    }
    case Contrib::kShare: {
      if (!map_tensor) return id;
      const ir::TensorId t = map_tensor(c.tensor);
      if (t == c.tensor) return id;
      auto [it, fresh] = moved_shares_.try_emplace({id, t}, kBadContrib);
      if (fresh) {
        const std::string name = tensor_name ? tensor_name(t) : std::string("?");
        it->second = c.even ? EvenShare(t, c.chunks[0], c.part, name)
                            : Share(t, c.chunks[0], c.part, name);
      }
      return it->second;
    }
    case Contrib::kRed: {
      const ir::OpId op = map(families_[c.family].op);
      if (op == families_[c.family].op) return id;
      int family;
      if (auto it = moved_families_.find({c.family, op}); it != moved_families_.end()) {
        family = it->second;
      } else {
        Family f = families_[c.family];
        f.key = Rekey(f.key, op);
        f.op = op;
        f.what = name(op, f.output);
        family = InternFamily(std::move(f));
        moved_families_.emplace(std::make_pair(c.family, op), family);
      }
      return Red(family, c.chunks, c.additive);
    }
    case Contrib::kLin: {
      std::vector<ContribId> parts;
      bool changed = false;
      for (ContribId p : c.parts) {
        parts.push_back(MapOps(p, map, name, map_tensor, tensor_name));
        changed = changed || parts.back() != p;
      }
      const ir::OpId op = map(descs_[c.desc].op);
      if (op == descs_[c.desc].op && !changed) return id;
      int desc = c.desc;
      if (op != descs_[c.desc].op) {
        if (auto it = moved_descs_.find({c.desc, op}); it != moved_descs_.end()) {
          desc = it->second;
        } else {
          const Desc d = descs_[c.desc];
          desc = InternDesc(op, d.output, d.shape, d.bounds, name(op, d.output), d.operands);
          moved_descs_.emplace(std::make_pair(c.desc, op), desc);
        }
      }
      return Lin(desc, std::move(parts));
    }
  }
  return id;
}

std::optional<ContribId> ContribStore::Extrapolate(ContribId a, ContribId b, int64_t t) {
  if (a == b) return a;
  const Contrib ca = contribs_[a];
  const Contrib cb = contribs_[b];
  if (ca.kind != cb.kind) return std::nullopt;
  switch (ca.kind) {
    case Contrib::kScaled: {
      if (ca.factor != cb.factor) return std::nullopt;
      auto base = Extrapolate(ca.base, cb.base, t);
      if (!base.has_value()) return std::nullopt;
      return Scaled(*base, ca.factor);
    }
    case Contrib::kRed: {
      if (ca.family != cb.family || ca.chunks.size() != cb.chunks.size() ||
          ca.additive != cb.additive) {
        return std::nullopt;
      }
      const std::vector<int64_t> extents = families_[ca.family].extents;
      std::vector<ir::Box> chunks = ca.chunks;
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (cb.chunks[i].size() != chunks[i].size()) return std::nullopt;
        for (size_t d = 0; d < chunks[i].size(); ++d) {
          ir::Interval& iv = chunks[i][d];
          const ir::Interval& jv = cb.chunks[i][d];
          iv.begin += t * (jv.begin - iv.begin);
          iv.end += t * (jv.end - iv.end);
          if (iv.begin < 0 || iv.begin > iv.end ||
              (d < extents.size() && iv.end > extents[d])) {
            return std::nullopt;
          }
        }
      }
      return Red(ca.family, std::move(chunks), ca.additive);
    }
    case Contrib::kLin: {
      if (ca.parts.size() != cb.parts.size()) return std::nullopt;
      int desc = ca.desc;
      if (ca.desc != cb.desc) {
        // The same piece of the op at bounds that move with t.
        const Desc da = descs_[ca.desc];
        const Desc& db = descs_[cb.desc];
        if (da.op != db.op || da.output != db.output || da.shape != db.shape ||
            da.bounds.size() != db.bounds.size()) {
          return std::nullopt;
        }
        std::vector<ir::Interval> bounds = da.bounds;
        for (size_t i = 0; i < bounds.size(); ++i) {
          bounds[i].begin += t * (db.bounds[i].begin - bounds[i].begin);
          bounds[i].end += t * (db.bounds[i].end - bounds[i].end);
          if (bounds[i].begin < 0 || bounds[i].begin > bounds[i].end) return std::nullopt;
        }
        desc = InternDesc(da.op, da.output, da.shape, std::move(bounds), da.what, da.operands);
      }
      std::vector<ContribId> parts;
      for (size_t i = 0; i < ca.parts.size(); ++i) {
        auto p = Extrapolate(ca.parts[i], cb.parts[i], t);
        if (!p.has_value()) return std::nullopt;
        parts.push_back(*p);
      }
      return Lin(desc, std::move(parts));
    }
    case Contrib::kShare: {
      if (ca.tensor != cb.tensor || !(ca.part == cb.part) || ca.even != cb.even) {
        return std::nullopt;
      }
      ir::Box box = ca.chunks[0];
      if (box.size() != cb.chunks[0].size()) return std::nullopt;
      for (size_t d = 0; d < box.size(); ++d) {
        box[d].begin += t * (cb.chunks[0][d].begin - box[d].begin);
        box[d].end += t * (cb.chunks[0][d].end - box[d].end);
        if (box[d].begin < 0 || box[d].begin > box[d].end) return std::nullopt;
      }
      return ca.even ? EvenShare(ca.tensor, box, ca.part, share_names_[ca.tensor])
                     : Share(ca.tensor, box, ca.part, share_names_[ca.tensor]);
    }
    default:
      return std::nullopt;  // distinct complete, zero or bad contributions
  }
}

std::optional<ContribId> ContribStore::ProgressionSum(ContribId a, ContribId b, int64_t n) {
  if (n == 1) return a;
  if (a == b) return a == kZeroContrib ? std::optional<ContribId>(a) : std::nullopt;
  const Contrib ca = contribs_[a];
  const Contrib cb = contribs_[b];
  if (ca.kind != cb.kind) return std::nullopt;
  if (ca.kind == Contrib::kScaled) {
    if (ca.factor != cb.factor) return std::nullopt;
    auto base = ProgressionSum(ca.base, cb.base, n);
    if (!base.has_value()) return std::nullopt;
    return Scaled(*base, ca.factor);
  }
  if (ca.kind == Contrib::kLin) {
    if (ca.desc != cb.desc || ca.parts.size() != cb.parts.size()) return std::nullopt;
    std::vector<ContribId> parts;
    for (size_t i = 0; i < ca.parts.size(); ++i) {
      auto p = ProgressionSum(ca.parts[i], cb.parts[i], n);
      if (!p.has_value()) return std::nullopt;
      parts.push_back(*p);
    }
    return Lin(ca.desc, std::move(parts));
  }
  if (ca.kind != Contrib::kRed || ca.family != cb.family || ca.chunks.size() != cb.chunks.size() ||
      ca.additive != cb.additive) {
    return std::nullopt;
  }
  // n copies of an additive input would count it n times.
  if (std::any_of(ca.additive.begin(), ca.additive.end(), [](int x) { return x != 0; })) {
    return std::nullopt;
  }
  const std::vector<int64_t> extents = families_[ca.family].extents;
  std::vector<ContribId> spans;
  for (size_t j = 0; j < ca.chunks.size(); ++j) {
    const ir::Box& x = ca.chunks[j];
    const ir::Box& y = cb.chunks[j];
    if (x.size() != y.size() || x.size() > extents.size()) return std::nullopt;
    int moved = -1;
    for (size_t d = 0; d < x.size(); ++d) {
      if (x[d] == y[d]) continue;
      const int64_t w = x[d].size();
      if (moved >= 0 || w <= 0 || y[d].begin != x[d].begin + w || y[d].end != x[d].end + w) {
        return std::nullopt;
      }
      moved = static_cast<int>(d);
    }
    if (moved < 0) return std::nullopt;
    ir::Box span = x;
    span[moved].end = x[moved].begin + n * x[moved].size();
    if (span[moved].end > extents[moved]) return std::nullopt;
    spans.push_back(Red(ca.family, {span}, ca.additive));
  }
  SumResult r = Sum(spans, families_[ca.family].reduce);
  if (!r.ok) return std::nullopt;
  return r.id;
}

ContribId ContribStore::Share(ir::TensorId tensor, const ir::Box& box, const ir::ValuePart& part,
                              const std::string& name) {
  if (part.IsFull()) return kFullContrib;
  if (part.IsEmpty()) return kZeroContrib;
  share_names_.try_emplace(tensor, name);
  Contrib c;
  c.kind = Contrib::kShare;
  c.tensor = tensor;
  c.chunks = {box};
  c.part = part;
  return Intern(std::move(c));
}

ContribId ContribStore::EvenShare(ir::TensorId tensor, const ir::Box& box,
                                  const ir::ValuePart& part, const std::string& name) {
  if (part.IsFull()) return kFullContrib;
  if (part.IsEmpty()) return kZeroContrib;
  share_names_.try_emplace(tensor, name);
  Contrib c;
  c.kind = Contrib::kShare;
  c.tensor = tensor;
  c.chunks = {box};
  c.part = part;
  c.even = true;
  return Intern(std::move(c));
}

std::optional<ContribStore::MemberPart> ContribStore::MemberPartOf(ContribId id) const {
  const Contrib& c = contribs_[id];
  switch (c.kind) {
    case Contrib::kShare: {
      const std::optional<int64_t> n = c.part.EqualShareCount();
      if (!n.has_value()) return std::nullopt;
      return MemberPart{c.part, *n};
    }
    case Contrib::kRed: {
      const Family& f = families_[c.family];
      if (c.chunks.size() != 1 || f.reduce != ir::ReduceOp::kSum) return std::nullopt;
      const ir::Box& b = c.chunks[0];
      std::optional<MemberPart> out;
      for (size_t d = 0; d < b.size() && d < f.extents.size(); ++d) {
        if (b[d].begin == 0 && b[d].end == f.extents[d]) continue;
        const int64_t size = b[d].size();
        if (out.has_value() || size <= 0 || f.extents[d] % size != 0 || b[d].begin % size != 0) {
          return std::nullopt;
        }
        const int64_t n = f.extents[d] / size;
        out = MemberPart{ir::ValuePart::Full().Share(b[d].begin / size, n), n};
      }
      return out;
    }
    case Contrib::kLin: {
      std::optional<MemberPart> out;
      for (ContribId p : c.parts) {
        if (p == kZeroContrib) continue;
        if (p == kFullContrib) return std::nullopt;
        std::optional<MemberPart> m = MemberPartOf(p);
        if (!m.has_value() || (out.has_value() && (out->part != m->part))) return std::nullopt;
        out = m;
      }
      return out;
    }
    default:
      return std::nullopt;
  }
}

ContribId ContribStore::Scaled(ContribId id, const ir::Rational& factor) {
  if (id == kZeroContrib || id == kBadContrib || factor.IsOne()) return id;
  if (factor.num == 0) return kZeroContrib;
  const Unscaled u = Unscale(id);
  const std::optional<ir::Rational> total = ir::Multiply(u.factor, factor);
  if (!total.has_value()) return kBadContrib;
  if (total->IsOne()) return u.base;
  Contrib c;
  c.kind = Contrib::kScaled;
  c.base = u.base;
  c.factor = *total;
  return Intern(std::move(c));
}

ContribStore::Unscaled ContribStore::Unscale(ContribId id) const {
  const Contrib& c = contribs_[id];
  if (c.kind != Contrib::kScaled) return Unscaled{id, ir::Rational::One()};
  return Unscaled{c.base, c.factor};
}

ContribId ContribStore::Red(int family, std::vector<ir::Box> chunks, std::vector<int> additive) {
  const Family& f = families_[family];
  int64_t total = 1;
  for (int64_t e : f.extents) total *= e;
  int64_t vol = 0;
  for (const ir::Box& b : chunks) vol += Volume(b);
  if (vol == total && std::all_of(additive.begin(), additive.end(), [](int a) { return a == 1; })) {
    return kFullContrib;
  }
  Coalesce(chunks);
  Contrib c;
  c.kind = Contrib::kRed;
  c.family = family;
  c.chunks = std::move(chunks);
  c.additive = std::move(additive);
  return Intern(std::move(c));
}

ContribId ContribStore::Lin(int desc, std::vector<ContribId> parts) {
  if (std::all_of(parts.begin(), parts.end(), [](ContribId p) { return p == kFullContrib; })) {
    return kFullContrib;
  }
  if (std::any_of(parts.begin(), parts.end(), [](ContribId p) { return p == kBadContrib; })) {
    return kBadContrib;
  }
  Contrib c;
  c.kind = Contrib::kLin;
  c.desc = desc;
  c.parts = std::move(parts);
  return Intern(std::move(c));
}

std::string ContribStore::Describe(ContribId id) const {
  const Contrib& c = contribs_[id];
  switch (c.kind) {
    case Contrib::kFull: return "the complete value";
    case Contrib::kZero: return "zeros";
    case Contrib::kBad: return "an underivable value";
    case Contrib::kRed: {
      const Family& f = families_[c.family];
      std::vector<std::string> chunks;
      for (const ir::Box& b : c.chunks) chunks.push_back(ir::BoxToString(b));
      return absl::StrCat("a partial ", ReductionNoun(f.reduce), " (chunk ",
                          absl::StrJoin(chunks, "+"), " of the reduction over ",
                          absl::StrJoin(f.labels, ","), " of size ",
                          absl::StrJoin(f.extents, "x"), " in ", f.what, ")");
    }
    case Contrib::kLin:
      return absl::StrCat("a partial sum of ", descs_[c.desc].what);
    case Contrib::kScaled:
      return absl::StrCat(c.factor.ToString(), " times ", Describe(c.base));
    case Contrib::kShare: {
      auto it = share_names_.find(c.tensor);
      return absl::StrCat(c.even ? "an even share " : "share ", c.part.ToString(), " of '",
                          it == share_names_.end() ? std::string("?") : it->second, "' ",
                          ir::BoxToString(c.chunks[0]));
    }
  }
  return "?";
}

std::string ContribStore::Example(ContribId id) const {
  const Contrib& c = contribs_[id];
  switch (c.kind) {
    case Contrib::kFull:
      return "with every element equal to 1, it holds 1, the complete value";
    case Contrib::kZero:
      return "with every element equal to 1, it holds 0 where the complete value is 1";
    case Contrib::kBad:
      return "";
    case Contrib::kRed: {
      const Family& f = families_[c.family];
      const int64_t total = Product(f.extents);
      if (f.reduce == ir::ReduceOp::kMax) {
        int64_t held = -1;
        for (const ir::Box& b : c.chunks) held = std::max(held, LastIndex(b, f.extents));
        return absl::StrCat("with term j of ", Space(f), " equal to j, it holds ", held, " (",
                            Chunks(c.chunks), ") where the complete value is ", total - 1);
      }
      int64_t held = 0;
      for (const ir::Box& b : c.chunks) held += Volume(b);
      if (f.reduce == ir::ReduceOp::kLogSumExp) {
        return absl::StrCat("with every score of ", Space(f),
                            " equal to 0, its log-sum-exp is log(", held, ") (",
                            Chunks(c.chunks), ") where the complete value's is log(", total, ")");
      }
      if (f.num_additive == 0) {
        return absl::StrCat("with every term of ", Space(f), " equal to 1, it holds ", held, " (",
                            Chunks(c.chunks), ") where the complete value is ", total);
      }
      int64_t adds = 0;
      for (int a : c.additive) adds += a;
      return absl::StrCat("with every term of ", Space(f),
                          " and every additive input (a bias) equal to 1, it holds ", held + adds,
                          " (", Chunks(c.chunks), ", ", adds, " of ", f.num_additive,
                          " additive inputs) where the complete value is ", total + f.num_additive);
    }
    case Contrib::kLin: {
      const Desc& d = descs_[c.desc];
      for (size_t j = 0; j < c.parts.size(); ++j) {
        if (c.parts[j] == kFullContrib) continue;
        const std::string operand =
            j < d.operands.size() ? d.operands[j] : absl::StrCat("linear operand ", j);
        return absl::StrCat("in ", operand, " of ", d.what, ", ", Example(c.parts[j]));
      }
      return "";
    }
    case Contrib::kScaled:
      if (c.base == kFullContrib) {
        return absl::StrCat("with every element equal to 1, it holds ", c.factor.ToString(),
                            " where the complete value is 1");
      }
      return absl::StrCat(c.factor.ToString(), " times this: ", Example(c.base));
    case Contrib::kShare:
      return absl::StrCat("with the value equal to 1 and its shares in proportion to their parts, "
                          "it holds ", PartLength(c.part), " (share ", c.part.ToString(),
                          ") where the complete value is 1");
  }
  return "";
}

bool ContribStore::HoldsPartialSum(ContribId id) const {
  const Contrib& c = contribs_[id];
  if (c.kind == Contrib::kScaled) return HoldsPartialSum(c.base);
  if (c.kind == Contrib::kRed || c.kind == Contrib::kShare) return true;
  if (c.kind != Contrib::kLin) return false;
  return std::any_of(c.parts.begin(), c.parts.end(),
                     [&](ContribId p) { return HoldsPartialSum(p); });
}

ContribStore::SumResult ContribStore::Sum(absl::Span<const ContribId> ids, ir::ReduceOp reduce) {
  const bool is_max = reduce == ir::ReduceOp::kMax;
  // Scaled values: their common factor taken out of the sum.
  std::vector<ContribId> bases;
  std::optional<ir::Rational> factor;
  for (ContribId id : ids) {
    if (id == kBadContrib) return SumResult{true, kBadContrib};
    if (id == kZeroContrib) continue;
    const Unscaled u = Unscale(id);
    if (factor.has_value() && *factor != u.factor) {
      return Failed(FailureClass::kScaled,
                    absl::StrCat("combines values scaled differently (by ", factor->ToString(),
                                 " and by ", u.factor.ToString(), ")"),
                    absl::StrCat("with every element equal to 1: one member holds ",
                                 factor->ToString(), " times its piece, another ",
                                 u.factor.ToString(), " times its own, so no multiple of the "
                                 "whole comes of their ", is_max ? "maximum" : "sum"));
    }
    factor = u.factor;
    bases.push_back(u.base);
  }
  if (!factor.has_value() || factor->IsOne()) return SumUnscaled(bases, reduce);
  if (reduce == ir::ReduceOp::kLogSumExp) {
    return Failed(FailureClass::kScaled,
                  absl::StrCat("merges partial softmaxes scaled by ", factor->ToString()),
                  absl::StrCat("with every score 0: each member's value is ", factor->ToString(),
                               " times its piece's, and so is their merge, where the merge of "
                               "the pieces is wanted"));
  }
  if (is_max && factor->num < 0) {
    return Failed(FailureClass::kScaled,
                  absl::StrCat("takes the maximum of values scaled by ", factor->ToString()),
                  absl::StrCat("with pieces 1 and 2 scaled by ", factor->ToString(),
                               ": their maximum is the smaller one's multiple"));
  }
  SumResult r = SumUnscaled(bases, reduce);
  if (r.ok) r.id = Scaled(r.id, *factor);
  return r;
}

ContribStore::SumResult ContribStore::SumUnscaled(absl::Span<const ContribId> ids,
                                                  ir::ReduceOp reduce) {
  const bool is_max = reduce == ir::ReduceOp::kMax;
  std::vector<ContribId> live;
  int full = 0;
  for (ContribId id : ids) {
    if (id == kBadContrib) return SumResult{true, kBadContrib};
    if (id == kZeroContrib) continue;
    if (id == kFullContrib) ++full;
    live.push_back(id);
  }
  if (reduce == ir::ReduceOp::kLogSumExp) return MergeUnscaled(ids);
  if (live.empty()) return SumResult{true, kZeroContrib};
  if (full > 0) return SumWithComplete(live, full, is_max);
  const Contrib first = contribs_[live[0]];  // a copy: summing the parts below may grow the store
  for (ContribId id : live) {
    if (contribs_[id].kind != first.kind ||
        (first.kind == Contrib::kRed && contribs_[id].family != first.family) ||
        (first.kind == Contrib::kLin && contribs_[id].desc != first.desc)) {
      return Failed(FailureClass::kWrongGroup,
                    absl::StrCat("combines ", Describe(live[0]), " with ", Describe(id)),
                    absl::StrCat("one member: ", Example(live[0]), "; another: ", Example(id),
                                 "; no sum of chunks of either adds up to the other"));
    }
  }
  if (first.kind == Contrib::kShare) return SumShares(live, first, is_max);
  if (first.kind == Contrib::kRed) return SumChunks(live, first, reduce);
  return SumLinear(live, first, reduce);
}

// Partial softmaxes merge by the online-softmax identity: only chunks of one
// reduction, each once. Zeros are no identity of the merge (a log-sum-exp of 0 is
// no empty softmax's), and a complete value merged again counts its keys twice.
ContribStore::SumResult ContribStore::MergeUnscaled(absl::Span<const ContribId> ids) {
  for (ContribId id : ids) {
    if (id == kBadContrib) return SumResult{true, kBadContrib};
  }
  for (ContribId id : ids) {
    const Contrib& c = contribs_[id];
    if (c.kind == Contrib::kRed && families_[c.family].reduce == ir::ReduceOp::kLogSumExp) {
      continue;
    }
    if (id == kFullContrib && ids.size() == 1) return SumResult{true, kFullContrib};
    return Failed(id == kFullContrib ? FailureClass::kDoubledPiece
                                     : FailureClass::kComputationDiffers,
                  absl::StrCat("merges ", Describe(id), " as a partial softmax"),
                  id == kFullContrib
                      ? std::string("with every score 0: the complete softmax over n keys merged "
                                    "again gives a log-sum-exp of log(2n) where it is log(n)")
                      : absl::StrCat("a partial softmax's log-sum-exp is the log of its weights' "
                                     "total; ", Example(id)));
  }
  const Contrib first = contribs_[ids[0]];
  for (ContribId id : ids) {
    if (contribs_[id].family != first.family) {
      return Failed(FailureClass::kWrongGroup,
                    absl::StrCat("merges ", Describe(ids[0]), " with ", Describe(id)),
                    absl::StrCat("one member: ", Example(ids[0]), "; another: ", Example(id)));
    }
  }
  std::vector<ContribId> live(ids.begin(), ids.end());
  return SumChunks(live, first, ir::ReduceOp::kLogSumExp);
}

ContribStore::SumResult ContribStore::SumWithComplete(const std::vector<ContribId>& live,
                                                      int full, bool is_max) {
  if (is_max) return SumResult{true, kFullContrib};  // max(x, pieces of x) = x
  if (live.size() == 1) return SumResult{true, kFullContrib};
  // n copies of the complete value: n times it (what its claim says decides).
  if (full == static_cast<int>(live.size())) {
    return SumResult{true, Scaled(kFullContrib, ir::Rational::Of(full, 1))};
  }
  ContribId partial = kBadContrib;
  for (ContribId id : live) {
    if (id != kFullContrib) partial = id;
  }
  return Failed(FailureClass::kDoubledPiece,
                "adds partial sums to a value that is already complete",
                absl::StrCat("the complete value is added to a partial sum (", Example(partial),
                             "), so the result exceeds the complete value by that part"));
}

ContribStore::SumResult ContribStore::SumShares(const std::vector<ContribId>& live,
                                                const Contrib& first, bool is_max) {
  // Shares of one value over one box: their parts must be disjoint; all of
  // them together are the complete value.
  ir::ValuePart part = ir::ValuePart::Empty();
  for (ContribId id : live) {
    const Contrib& c = contribs_[id];
    if (c.tensor != first.tensor || !(c.chunks[0] == first.chunks[0]) ||
        c.even != first.even) {
      return Failed(FailureClass::kWrongGroup,
                    absl::StrCat("combines ", Describe(live[0]), " with ", Describe(id)),
                    absl::StrCat("one member: ", Example(live[0]), "; another: ", Example(id),
                                 "; shares of different values never add up to either"));
    }
    if (is_max) {
      return Failed(FailureClass::kComputationDiffers, "combines shares of a sum by max",
                    "shares 3 and 5 combined by max give 5 where their sum is 8");
    }
    auto u = part.Union(c.part);
    if (!u.ok()) {
      return Failed(FailureClass::kDoubledPiece,
                    absl::StrCat("adds ", Describe(id), " to a sum that already holds ",
                                 c.part.ToString(), " of it"),
                    absl::StrCat("with the value equal to 1 and its shares in proportion to "
                                 "their parts: share ",
                                 c.part.ToString(), " is counted twice"));
    }
    part = *std::move(u);
  }
  auto it = share_names_.find(first.tensor);
  const std::string name = it == share_names_.end() ? std::string("?") : it->second;
  return SumResult{true, first.even ? EvenShare(first.tensor, first.chunks[0], part, name)
                                    : Share(first.tensor, first.chunks[0], part, name)};
}

ContribStore::SumResult ContribStore::SumChunks(const std::vector<ContribId>& live,
                                                const Contrib& first, ir::ReduceOp reduce) {
  const bool is_max = reduce == ir::ReduceOp::kMax;
  const Family& f = families_[first.family];
  if (f.reduce != reduce) {
    if (f.reduce == ir::ReduceOp::kLogSumExp || reduce == ir::ReduceOp::kLogSumExp) {
      return Failed(FailureClass::kComputationDiffers,
                    absl::StrCat("combines a partial ", ReductionNoun(f.reduce), " by ",
                                 ir::ReduceOpName(reduce)),
                    "partial softmaxes merge by their log-sum-exp (attention_merge): a sum or "
                    "maximum of their values and log-sum-exps is neither the value nor the "
                    "log-sum-exp of the whole");
    }
    return Failed(
        FailureClass::kComputationDiffers,
        absl::StrCat("combines partial ", f.reduce == ir::ReduceOp::kMax ? "maxima" : "sums",
                     " by ", is_max ? "max" : "sum"),
        is_max ? "partial sums 3 and 5 combined by max give 5 where their sum is 8"
               : "partial maxima 3 and 5 combined by sum give 8 where their maximum is 5");
  }
  std::vector<ir::Box> chunks;
  std::vector<int> additive(first.additive.size(), 0);
  for (ContribId id : live) {
    const Contrib& c = contribs_[id];
    for (const ir::Box& b : c.chunks) {
      bool dup = false;
      for (const ir::Box& o : chunks) {
        if (is_max && o == b) { dup = true; break; }
        if (Overlap(o, b)) {
          // Terms in the overlap set to 1, the others to 0.
          const ir::Box both = *ir::Intersect(o, b);
          int64_t held = 0;
          for (ContribId x : live) {
            for (const ir::Box& y : contribs_[x].chunks) {
              if (auto in = ir::Intersect(y, both)) held += Volume(*in);
            }
          }
          return Failed(FailureClass::kDoubledPiece,
                        absl::StrCat("adds chunk ", ir::BoxToString(b), " of the reduction over ",
                                     absl::StrJoin(f.labels, ","), " twice"),
                        absl::StrCat("with the terms of ", Space(f), " in ",
                                     ir::BoxToString(both),
                                     " equal to 1 and the others 0: the sum holds ", held,
                                     " where the complete value is ", Volume(both)));
        }
      }
      if (!dup) chunks.push_back(b);
    }
    for (size_t a = 0; a < additive.size() && a < c.additive.size(); ++a) {
      additive[a] += c.additive[a];
    }
  }
  for (int a : additive) {
    if (a > 1 && !is_max) {
      return Failed(FailureClass::kDoubledPiece,
                    absl::StrCat("adds an additive input (a bias) ", a, " times"),
                    absl::StrCat("with every term 0 and the additive input (a bias) equal to 1: "
                                 "the sum holds ",
                                 a, " where the complete value is 1"));
    }
  }
  if (is_max) {
    for (int& a : additive) a = std::min(a, 1);
  }
  return SumResult{true, Red(first.family, std::move(chunks), std::move(additive))};
}

ContribStore::SumResult ContribStore::SumLinear(const std::vector<ContribId>& live,
                                                const Contrib& first, ir::ReduceOp reduce) {
  // Linear pieces: sum position by position.
  std::vector<ContribId> parts;
  const Desc& d = descs_[first.desc];
  auto operand_name = [&](size_t j) {
    return j < d.operands.size() ? d.operands[j] : absl::StrCat("linear operand ", j);
  };
  for (size_t j = 0; j < first.parts.size(); ++j) {
    std::vector<ContribId> column;
    for (ContribId id : live) column.push_back(contribs_[id].parts[j]);
    SumResult r = Sum(column, reduce);
    if (!r.ok) {
      r.message = absl::StrCat(r.message, " (", operand_name(j), " of ", d.what, ")");
      r.counterexample =
          absl::StrCat("in ", operand_name(j), " of ", d.what, ", ", r.counterexample);
      return r;
    }
    parts.push_back(r.id);
  }
  // Every position scaled alike scales the piece; otherwise a term is counted more
  // (or less) often than the others: copies of one complete operand among
  // partial ones count that term more than once.
  std::optional<ir::Rational> common;
  bool alike = true;
  for (ContribId p : parts) {
    if (p == kZeroContrib) continue;
    const ir::Rational k = Unscale(p).factor;
    if (common.has_value() && *common != k) alike = false;
    common = k;
  }
  if (!alike) {
    size_t j = 0;
    while (j < parts.size() && Unscale(parts[j]).factor.IsOne()) ++j;
    const ir::Rational k = j < parts.size() ? Unscale(parts[j]).factor : ir::Rational::One();
    return Failed(FailureClass::kDoubledPiece,
                  absl::StrCat("counts ", operand_name(j), " of ", d.what, " ", k.ToString(),
                               " times"),
                  absl::StrCat("in ", operand_name(j), " of ", d.what, ", with every element "
                               "equal to 1: that term adds up to ", k.ToString(),
                               " where the others add up to 1"));
  }
  if (!common.has_value() || common->IsOne()) {
    return SumResult{true, Lin(first.desc, std::move(parts))};
  }
  for (ContribId& p : parts) p = Unscale(p).base;
  return SumResult{true, Scaled(Lin(first.desc, std::move(parts)), *common)};
}

}  // namespace loom::verify
