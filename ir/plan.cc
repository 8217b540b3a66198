#include "ir/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/status_macros.h"

namespace loom::ir {

// ---- Mesh ------------------------------------------------------------------------

int64_t Mesh::num_devices() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

int Mesh::AxisIndex(absl::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int64_t Mesh::AxisSize(absl::string_view name) const {
  int i = AxisIndex(name);
  return i < 0 ? 1 : axes_[i].size;
}

std::vector<int64_t> Mesh::Coordinates(int64_t device) const {
  std::vector<int64_t> coords(axes_.size(), 0);
  for (int i = static_cast<int>(axes_.size()) - 1; i >= 0; --i) {
    const int64_t size = std::max<int64_t>(axes_[i].size, 1);
    coords[i] = device % size;
    device /= size;
  }
  return coords;
}

int64_t Mesh::Device(absl::Span<const int64_t> coordinates) const {
  int64_t device = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    device = device * axes_[i].size + (i < coordinates.size() ? coordinates[i] : 0);
  }
  return device;
}

std::vector<int64_t> Mesh::Group(int64_t device, int axis) const {
  if (axis < 0 || axis >= static_cast<int>(axes_.size())) return {device};
  std::vector<int64_t> coords = Coordinates(device);
  std::vector<int64_t> group;
  group.reserve(axes_[axis].size);
  for (int64_t c = 0; c < axes_[axis].size; ++c) {
    coords[axis] = c;
    group.push_back(Device(coords));
  }
  return group;
}

std::string Mesh::ToString() const {
  return absl::StrJoin(axes_, " x ", [](std::string* out, const MeshAxis& a) {
    absl::StrAppend(out, a.name, "=", a.size);
  });
}

bool Mesh::operator==(const Mesh& o) const { return axes_ == o.axes_; }

// ---- Rational --------------------------------------------------------------------

namespace {

using Int128 = __int128;

Int128 Gcd128(Int128 a, Int128 b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    Int128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Normalises num/den computed in 128 bits. Values that do not fit in 64 bits after
// reduction are clamped (they do not occur in plans: denominators are products of
// split degrees).
Rational Normalize128(Int128 num, Int128 den) {
  if (den == 0) return Rational{0, 1};
  if (den < 0) {
    num = -num;
    den = -den;
  }
  Int128 g = Gcd128(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  if (num == 0) den = 1;
  constexpr Int128 kMax = INT64_MAX;
  if (num > kMax || num < -kMax || den > kMax) return Rational{0, 1};
  return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}

}  // namespace

Rational Rational::Of(int64_t num, int64_t den) { return Normalize128(num, den); }

bool Rational::operator<(const Rational& o) const {
  return static_cast<Int128>(num) * o.den < static_cast<Int128>(o.num) * den;
}

std::string Rational::ToString() const {
  if (den == 1) return absl::StrCat(num);
  return absl::StrCat(num, "/", den);
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kLogSumExp: return "logsumexp";
  }
  return "?";
}

namespace {
std::optional<Rational> Fits(Int128 num, Int128 den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Int128 g = Gcd128(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  if (num == 0) den = 1;
  constexpr Int128 kMax = INT64_MAX;
  if (num > kMax || num < -kMax || den > kMax) return std::nullopt;
  return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
}
}  // namespace

std::optional<Rational> Multiply(const Rational& a, const Rational& b) {
  return Fits(static_cast<Int128>(a.num) * b.num, static_cast<Int128>(a.den) * b.den);
}

std::optional<Rational> Divide(const Rational& a, const Rational& b) {
  return Fits(static_cast<Int128>(a.num) * b.den, static_cast<Int128>(a.den) * b.num);
}

std::optional<Rational> RationalOfDouble(double x) {
  if (!std::isfinite(x)) return std::nullopt;
  // Continued fraction convergents of |x|, until one's double is x.
  const bool negative = x < 0;
  const double target = negative ? -x : x;
  double rest = target;
  Int128 p0 = 0, q0 = 1, p1 = 1, q1 = 0;
  for (int i = 0; i < 64; ++i) {
    const double whole = std::floor(rest);
    if (whole > 9.0e15) return std::nullopt;
    const Int128 a = static_cast<Int128>(whole);
    const Int128 p2 = a * p1 + p0, q2 = a * q1 + q0;
    if (q2 > (Int128{1} << 24)) return std::nullopt;
    if (static_cast<double>(p2) / static_cast<double>(q2) == target) {
      return Fits(negative ? -p2 : p2, q2);
    }
    const double frac = rest - whole;
    if (frac <= 0) return std::nullopt;
    rest = 1.0 / frac;
    p0 = p1;
    q0 = q1;
    p1 = p2;
    q1 = q2;
  }
  return std::nullopt;
}

// ---- ValuePart -------------------------------------------------------------------

namespace {

bool LessEq(const Rational& a, const Rational& b) { return !(b < a); }

// Sorts pieces, drops empty ones and merges adjacent ones. Overlaps must have been
// excluded by the caller.
ValuePart::Pieces Canonical(ValuePart::Pieces pieces) {
  std::sort(pieces.begin(), pieces.end(),
            [](const ValuePart::Piece& a, const ValuePart::Piece& b) { return a.lo < b.lo; });
  ValuePart::Pieces out;
  for (const ValuePart::Piece& p : pieces) {
    if (!(p.lo < p.hi)) continue;
    if (!out.empty() && out.back().hi == p.lo) {
      out.back().hi = p.hi;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// True when some piece of `a` overlaps some piece of `b` (both sorted, disjoint).
bool Overlap(const ValuePart::Pieces& a, const ValuePart::Pieces& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return true;
    if (a[i].hi < b[j].hi) {
      ++i;
    } else {
      ++j;
    }
  }
  return false;
}

// "3" or "1/4": non-negative decimal integers, nothing else.
absl::StatusOr<Rational> ParseRational(absl::string_view text);

}  // namespace

absl::StatusOr<Rational> ParseSignedRational(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const bool negative = !text.empty() && text[0] == '-';
  LOOM_ASSIGN_OR_RETURN(Rational r, ParseRational(negative ? text.substr(1) : text));
  if (negative) r.num = -r.num;
  return r;
}

namespace {

absl::StatusOr<Rational> ParseRational(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(why, " '", text, "'"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  if (parts.size() > 2) return bad("bad number");
  int64_t values[2] = {0, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty() || !std::all_of(parts[i].begin(), parts[i].end(),
                                         [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("bad number");
    }
    if (!absl::SimpleAtoi(parts[i], &values[i])) return bad("number out of range");
  }
  if (values[1] == 0) return bad("zero denominator in");
  return Rational::Of(values[0], values[1]);
}

}  // namespace

ValuePart ValuePart::Full() {
  ValuePart p;
  p.pieces_.push_back({Rational{0, 1}, Rational{1, 1}});
  return p;
}

ValuePart ValuePart::Empty() { return ValuePart(); }

ValuePart ValuePart::Share(int64_t k, int64_t n) const {
  if (n <= 0 || k < 0 || k >= n) return Empty();
  if (n == 1) return *this;
  ValuePart out;
  for (const Piece& p : pieces_) {
    // lo + (hi - lo) * k / n over the common denominator den_lo * den_hi * n.
    const Int128 den = static_cast<Int128>(p.lo.den) * p.hi.den * n;
    const Int128 lo = static_cast<Int128>(p.lo.num) * p.hi.den * n;
    const Int128 width =
        static_cast<Int128>(p.hi.num) * p.lo.den - static_cast<Int128>(p.lo.num) * p.hi.den;
    out.pieces_.push_back({Normalize128(lo + width * k, den),
                           Normalize128(lo + width * (k + 1), den)});
  }
  out.pieces_ = Canonical(std::move(out.pieces_));
  return out;
}

ValuePart ValuePart::Refine(const Rational& lo, const Rational& hi) const {
  // a + (b - a) x for x = lo, hi, over 128 bits.
  auto at = [](const Piece& p, const Rational& x) {
    const Int128 den = static_cast<Int128>(p.lo.den) * p.hi.den * x.den;
    const Int128 a = static_cast<Int128>(p.lo.num) * p.hi.den * x.den;
    const Int128 width =
        static_cast<Int128>(p.hi.num) * p.lo.den - static_cast<Int128>(p.lo.num) * p.hi.den;
    return Normalize128(a + width * x.num, den);
  };
  const Int128 lo_x = static_cast<Int128>(lo.num) * hi.den;
  const Int128 hi_x = static_cast<Int128>(hi.num) * lo.den;
  if (lo.num < 0 || lo_x > hi_x || hi.num > hi.den || lo.den <= 0 || hi.den <= 0) return Empty();
  if (lo_x == hi_x) return Empty();
  ValuePart out;
  for (const Piece& p : pieces_) out.pieces_.push_back({at(p, lo), at(p, hi)});
  out.pieces_ = Canonical(std::move(out.pieces_));
  return out;
}

std::optional<int64_t> ValuePart::EqualShareCount() const {
  if (pieces_.size() != 1) return std::nullopt;
  const Piece& p = pieces_[0];
  const int64_t n = std::lcm(p.lo.den, p.hi.den);
  if (n <= 1) return std::nullopt;
  if (p.hi.num * (n / p.hi.den) != p.lo.num * (n / p.lo.den) + 1) return std::nullopt;
  return n;
}

bool ValuePart::IsFull() const {
  return pieces_.size() == 1 && pieces_[0].lo == Rational{0, 1} &&
         pieces_[0].hi == Rational{1, 1};
}

bool ValuePart::Disjoint(const ValuePart& o) const { return !Overlap(pieces_, o.pieces_); }

absl::StatusOr<ValuePart> ValuePart::Union(const ValuePart& o) const {
  if (Overlap(pieces_, o.pieces_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("value parts ", ToString(), " and ", o.ToString(), " overlap"));
  }
  ValuePart out;
  out.pieces_ = pieces_;
  out.pieces_.insert(out.pieces_.end(), o.pieces_.begin(), o.pieces_.end());
  out.pieces_ = Canonical(std::move(out.pieces_));
  return out;
}

std::string ValuePart::ToString() const {
  if (IsEmpty()) return "0";
  if (IsFull()) return "full";
  return absl::StrJoin(pieces_, "+", [](std::string* out, const Piece& p) {
    absl::StrAppend(out, "[", p.lo.ToString(), ",", p.hi.ToString(), ")");
  });
}

absl::StatusOr<ValuePart> ValuePart::Parse(absl::string_view text) {
  const absl::string_view all = absl::StripAsciiWhitespace(text);
  if (all == "full") return Full();
  if (all == "0") return Empty();
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad value part '", text, "': ", why,
                                                   " (expected \"full\", \"0\" or "
                                                   "intervals like \"[0,1/4)+[1/2,3/4)\")"));
  };
  if (all.empty()) return bad("empty");
  Pieces pieces;
  for (absl::string_view piece : absl::StrSplit(all, '+')) {
    piece = absl::StripAsciiWhitespace(piece);
    absl::string_view item = piece;
    if (!absl::ConsumePrefix(&item, "[") || !absl::ConsumeSuffix(&item, ")")) {
      return bad(absl::StrCat("'", piece, "' is not an interval [lo,hi)"));
    }
    std::vector<absl::string_view> ends = absl::StrSplit(item, ',');
    if (ends.size() != 2) return bad(absl::StrCat("'", piece, "' needs two bounds"));
    auto lo = ParseRational(ends[0]);
    if (!lo.ok()) return bad(lo.status().message());
    auto hi = ParseRational(ends[1]);
    if (!hi.ok()) return bad(hi.status().message());
    if (!(*lo < *hi) || !LessEq(*hi, Rational{1, 1})) {
      return bad(absl::StrCat("[", lo->ToString(), ",", hi->ToString(),
                              ") is not a non-empty interval within [0,1)"));
    }
    pieces.push_back({*lo, *hi});
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.lo < b.lo; });
  for (size_t i = 1; i < pieces.size(); ++i) {
    if (pieces[i].lo < pieces[i - 1].hi) {
      return bad(absl::StrCat("[", pieces[i - 1].lo.ToString(), ",", pieces[i - 1].hi.ToString(),
                              ") and [", pieces[i].lo.ToString(), ",", pieces[i].hi.ToString(),
                              ") overlap"));
    }
  }
  ValuePart out;
  out.pieces_ = Canonical(std::move(pieces));
  return out;
}

// ---- Boxes -----------------------------------------------------------------------

Box FullBox(const Shape& shape) {
  Box box;
  box.reserve(shape.rank());
  for (int64_t d : shape.dims()) box.push_back({0, d});
  return box;
}

std::vector<int64_t> BoxDims(const Box& box) {
  std::vector<int64_t> dims;
  dims.reserve(box.size());
  for (const Interval& iv : box) dims.push_back(iv.size());
  return dims;
}

std::string BoxToString(const Box& box) {
  return absl::StrCat("[", absl::StrJoin(box, ",", [](std::string* out, const Interval& iv) {
                        absl::StrAppend(out, iv.begin, ":", iv.end);
                      }),
                      "]");
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  if (a.size() != b.size()) return std::nullopt;
  Box out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    out[i].begin = std::max(a[i].begin, b[i].begin);
    out[i].end = std::min(a[i].end, b[i].end);
    if (out[i].end <= out[i].begin) return std::nullopt;
  }
  return out;
}

bool Contains(const Box& outer, const Box& inner) {
  if (outer.size() != inner.size()) return false;
  for (size_t i = 0; i < outer.size(); ++i) {
    if (inner[i].begin < outer[i].begin || inner[i].end > outer[i].end ||
        inner[i].begin > inner[i].end) {
      return false;
    }
  }
  return true;
}

Shape ValueShape(const PlanValue& value) { return Shape(BoxDims(value.sub.box)); }

// ---- Collective kinds ------------------------------------------------------------

absl::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
#define LOOM_COLLECTIVE_NAME_(e, name) \
  case CollectiveKind::e:              \
    return name;
    LOOM_COLLECTIVE_KIND_LIST(LOOM_COLLECTIVE_NAME_)
#undef LOOM_COLLECTIVE_NAME_
  }
  return "?";
}

absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name) {
#define LOOM_COLLECTIVE_PARSE_(e, text) \
  if (name == text) return CollectiveKind::e;
  LOOM_COLLECTIVE_KIND_LIST(LOOM_COLLECTIVE_PARSE_)
#undef LOOM_COLLECTIVE_PARSE_
  return absl::InvalidArgumentError(absl::StrCat("unknown collective kind '", name, "'"));
}

// ---- Equality --------------------------------------------------------------------

bool operator==(const MeshAxis& a, const MeshAxis& b) {
  return a.name == b.name && a.size == b.size;
}

bool operator==(const PlanValue& a, const PlanValue& b) {
  return a.id == b.id && a.device == b.device && a.sub == b.sub && a.dtype == b.dtype &&
         a.microbatch == b.microbatch && a.dp_dim == b.dp_dim && a.dp_share == b.dp_share;
}

bool operator==(const Task& a, const Task& b) {
  return a.id == b.id && a.op == b.op && a.kind == b.kind && a.attrs == b.attrs &&
         a.device == b.device && a.info.phase == b.info.phase && a.info.layer == b.info.layer &&
         a.info.microbatch == b.info.microbatch && a.stage == b.stage &&
         a.recompute == b.recompute && a.inputs == b.inputs && a.outputs == b.outputs &&
         a.dp_attr_steps == b.dp_attr_steps;
}

bool operator==(const Collective& a, const Collective& b) {
  return a.id == b.id && a.kind == b.kind && a.reduce == b.reduce && a.devices == b.devices &&
         a.inputs == b.inputs && a.outputs == b.outputs && a.dim == b.dim && a.dim2 == b.dim2 &&
         a.microbatch == b.microbatch && a.phase == b.phase && a.layer == b.layer &&
         a.recompute == b.recompute && a.spans_dp == b.spans_dp;
}

bool operator==(const Factoring& a, const Factoring& b) {
  return a.dp == b.dp && a.dp_device_stride == b.dp_device_stride &&
         a.microbatches == b.microbatches;
}

bool operator==(const PlanStepSource& a, const PlanStepSource& b) {
  const TrainingOptions& x = a.training;
  const TrainingOptions& y = b.training;
  return a.model == b.model && a.tiny == b.tiny && a.layers == b.layers && a.batch == b.batch &&
         a.seq == b.seq && x.microbatches == y.microbatches && x.optimizer == y.optimizer &&
         x.lr == y.lr && x.beta1 == y.beta1 && x.beta2 == y.beta2 && x.eps == y.eps &&
         x.weight_decay == y.weight_decay && x.step == y.step &&
         x.max_grad_norm == y.max_grad_norm && x.precision == y.precision;
}

bool operator==(const Plan& a, const Plan& b) {
  return a.model == b.model && a.step == b.step && a.mesh == b.mesh && a.values == b.values && a.tasks == b.tasks &&
         a.collectives == b.collectives && a.outputs == b.outputs && a.order == b.order &&
         a.factored_order == b.factored_order && a.factoring == b.factoring;
}

// ---- FactoredOrder ---------------------------------------------------------------

bool FactoredOrder::empty() const { return num_steps() == 0; }

int64_t FactoredOrder::num_steps() const {
  int64_t n = 0;
  for (const std::vector<OrderRun>& program : programs) {
    for (const OrderRun& run : program) {
      if (run.segment >= 0 && run.segment < static_cast<int32_t>(segments.size())) {
        n += static_cast<int64_t>(segments[run.segment].size());
      }
    }
  }
  return n;
}

std::vector<PlanStep> FactoredOrder::Program(size_t d) const {
  std::vector<PlanStep> steps;
  if (d >= programs.size()) return steps;
  for (const OrderRun& run : programs[d]) {
    if (run.segment < 0 || run.segment >= static_cast<int32_t>(segments.size())) continue;
    for (PlanStep step : segments[run.segment]) {
      step.microbatch = run.microbatch;
      steps.push_back(step);
    }
  }
  return steps;
}

FactoredOrder FactoredOrder::FromPrograms(const std::vector<std::vector<PlanStep>>& programs) {
  FactoredOrder order;
  std::map<std::vector<std::pair<bool, int32_t>>, int32_t> index;
  order.programs.resize(programs.size());
  for (size_t d = 0; d < programs.size(); ++d) {
    const std::vector<PlanStep>& steps = programs[d];
    for (size_t i = 0; i < steps.size();) {
      size_t j = i;
      std::vector<std::pair<bool, int32_t>> key;
      for (; j < steps.size() && steps[j].microbatch == steps[i].microbatch; ++j) {
        key.push_back({steps[j].is_collective, steps[j].id});
      }
      auto [it, inserted] = index.try_emplace(key, static_cast<int32_t>(order.segments.size()));
      if (inserted) {
        std::vector<PlanStep> segment;
        for (const auto& [is_collective, id] : key) segment.push_back(PlanStep{is_collective, id});
        order.segments.push_back(std::move(segment));
      }
      order.programs[d].push_back(OrderRun{it->second, steps[i].microbatch});
      i = j;
    }
  }
  return order;
}

// ---- MicrobatchMap ---------------------------------------------------------------

absl::StatusOr<MicrobatchMap> MicrobatchMap::Build(const Graph& spec) {
  MicrobatchMap map;
  int max_m = -1;
  for (const ir::Op& op : spec.ops()) {
    if (op.info.microbatch < -1) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeOp(spec, op), " has micro-batch ",
                                                     op.info.microbatch, " (expected >= -1)"));
    }
    max_m = std::max(max_m, op.info.microbatch);
  }
  const int count = std::max(max_m + 1, 1);
  map.microbatches_ = count;
  map.ops_.assign(count, {});
  map.op_ordinal_.assign(spec.num_ops(), -1);
  map.op_microbatch_.assign(spec.num_ops(), -1);
  for (const ir::Op& op : spec.ops()) {
    const int m = op.info.microbatch;
    if (m < 0) continue;
    map.op_ordinal_[op.id] = static_cast<int>(map.ops_[m].size());
    map.op_microbatch_[op.id] = m;
    map.ops_[m].push_back(op.id);
  }
  for (int m = 1; m < count; ++m) {
    if (map.ops_[m].size() != map.ops_[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat("micro-batch ", m, " has ",
                                                     map.ops_[m].size(), " ops, micro-batch 0 has ",
                                                     map.ops_[0].size()));
    }
    for (size_t k = 0; k < map.ops_[m].size(); ++k) {
      const ir::Op& a = spec.op(map.ops_[0][k]);
      const ir::Op& b = spec.op(map.ops_[m][k]);
      if (a.kind != b.kind || a.attrs != b.attrs || a.inputs.size() != b.inputs.size() ||
          a.outputs.size() != b.outputs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op ", k, " of micro-batch ", m, ", ", DescribeOp(spec, b), " ", b.attrs.ToString(),
            " with ", b.inputs.size(), " inputs, does not match op ", k, " of micro-batch 0, ",
            DescribeOp(spec, a), " ", a.attrs.ToString(), " with ", a.inputs.size(), " inputs"));
      }
    }
  }
  // Data inputs first, then op outputs, per micro-batch.
  map.tensors_.assign(count, {});
  map.tensor_ordinal_.assign(spec.num_tensors(), -1);
  map.tensor_microbatch_.assign(spec.num_tensors(), -1);
  for (const ir::Tensor& t : spec.tensors()) {
    if (t.producer != kNoId || t.role != TensorRole::kInput || spec.consumers(t.id).empty()) {
      continue;
    }
    const int m = map.op_microbatch_[spec.consumers(t.id)[0]];
    if (m < 0) continue;
    map.tensors_[m].push_back(t.id);
  }
  for (int m = 1; m < count; ++m) {
    if (map.tensors_[m].size() != map.tensors_[0].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("micro-batch ", m, " has ", map.tensors_[m].size(),
                       " data inputs, micro-batch 0 has ", map.tensors_[0].size()));
    }
  }
  for (int m = 0; m < count; ++m) {
    for (OpId op : map.ops_[m]) {
      const std::vector<TensorId>& outs = spec.op(op).outputs;
      map.tensors_[m].insert(map.tensors_[m].end(), outs.begin(), outs.end());
    }
    for (size_t k = 0; k < map.tensors_[m].size(); ++k) {
      map.tensor_ordinal_[map.tensors_[m][k]] = static_cast<int>(k);
      map.tensor_microbatch_[map.tensors_[m][k]] = m;
    }
  }
  return map;
}

}  // namespace loom::ir
