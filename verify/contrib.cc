#include "verify/contrib.h"

#include <algorithm>
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

bool Overlap(const ir::Box& a, const ir::Box& b) { return ir::Intersect(a, b).has_value(); }

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

std::string Key(const Contrib& c) {
  switch (c.kind) {
    case Contrib::kFull: return "F";
    case Contrib::kZero: return "Z";
    case Contrib::kBad: return "B";
    case Contrib::kRed: {
      std::string k = absl::StrCat("R", c.family, ":");
      for (const ir::Box& b : c.chunks) absl::StrAppend(&k, ir::BoxToString(b));
      absl::StrAppend(&k, "+", absl::StrJoin(c.additive, ","));
      return k;
    }
    case Contrib::kLin:
      return absl::StrCat("L", c.desc, "(", absl::StrJoin(c.parts, ","), ")");
  }
  return "?";
}

ContribStore::SumResult Failed(FailureClass cls, std::string message) {
  ContribStore::SumResult r;
  r.ok = false;
  r.cls = cls;
  r.message = std::move(message);
  return r;
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

int ContribStore::InternDesc(const std::string& key, const std::string& what) {
  auto it = desc_ids_.find(key);
  if (it != desc_ids_.end()) return it->second;
  const int id = static_cast<int>(descs_.size());
  desc_ids_.emplace(key, id);
  descs_.push_back(what);
  return id;
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
      return absl::StrCat("a partial ", f.reduce == ir::ReduceOp::kMax ? "maximum" : "sum",
                          " (chunk ", absl::StrJoin(chunks, "+"), " of the reduction over ",
                          absl::StrJoin(f.labels, ","), " of size ",
                          absl::StrJoin(f.extents, "x"), " in ", f.what, ")");
    }
    case Contrib::kLin:
      return absl::StrCat("a partial sum of ", descs_[c.desc]);
  }
  return "?";
}

ContribStore::SumResult ContribStore::Sum(absl::Span<const ContribId> ids, ir::ReduceOp reduce) {
  const bool is_max = reduce == ir::ReduceOp::kMax;
  std::vector<ContribId> live;
  int full = 0;
  for (ContribId id : ids) {
    if (id == kBadContrib) return SumResult{true, kBadContrib};
    if (id == kZeroContrib) continue;
    if (id == kFullContrib) ++full;
    live.push_back(id);
  }
  if (live.empty()) return SumResult{true, kZeroContrib};
  if (full > 0) {
    if (is_max) return SumResult{true, kFullContrib};  // max(x, pieces of x) = x
    if (live.size() == 1) return SumResult{true, kFullContrib};
    if (full == static_cast<int>(live.size())) {
      return Failed(FailureClass::kScaled,
                    absl::StrCat("adds ", full, " copies of the complete value (scaled by ",
                                 full, ")"));
    }
    return Failed(FailureClass::kDoubledPiece,
                  "adds partial sums to a value that is already complete");
  }
  const Contrib& first = contribs_[live[0]];
  for (ContribId id : live) {
    if (contribs_[id].kind != first.kind ||
        (first.kind == Contrib::kRed && contribs_[id].family != first.family) ||
        (first.kind == Contrib::kLin && contribs_[id].desc != first.desc)) {
      return Failed(FailureClass::kWrongGroup,
                    absl::StrCat("combines ", Describe(live[0]), " with ", Describe(id)));
    }
  }
  if (first.kind == Contrib::kRed) {
    const Family& f = families_[first.family];
    if (f.reduce != reduce) {
      return Failed(FailureClass::kComputationDiffers,
                    absl::StrCat("combines partial ", f.reduce == ir::ReduceOp::kMax ? "maxima" : "sums",
                                 " by ", is_max ? "max" : "sum"));
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
            return Failed(FailureClass::kDoubledPiece,
                          absl::StrCat("adds chunk ", ir::BoxToString(b), " of the reduction over ",
                                       absl::StrJoin(f.labels, ","), " twice"));
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
                      absl::StrCat("adds an additive input (a bias) ", a, " times"));
      }
    }
    if (is_max) {
      for (int& a : additive) a = std::min(a, 1);
    }
    return SumResult{true, Red(first.family, std::move(chunks), std::move(additive))};
  }
  // Linear pieces: sum position by position.
  std::vector<ContribId> parts;
  for (size_t j = 0; j < first.parts.size(); ++j) {
    std::vector<ContribId> column;
    for (ContribId id : live) column.push_back(contribs_[id].parts[j]);
    SumResult r = Sum(column, reduce);
    if (!r.ok) {
      r.message = absl::StrCat(r.message, " (operand ", j, " of ", descs_[first.desc], ")");
      return r;
    }
    parts.push_back(r.id);
  }
  return SumResult{true, Lin(first.desc, std::move(parts))};
}

}  // namespace loom::verify
