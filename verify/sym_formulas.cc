#include "verify/sym_formulas.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::verify {

void DefineSymbolicFunctions(smt::Terms& terms) {
  terms.DefineFunction(internal::kArgMaxFn, internal::ArgMaxValue);
  terms.DefineFunction(internal::kTopKIndexFn, internal::TopKIndexValue);
  terms.DefineFunction(internal::kCosFn, internal::CosValue);
  terms.DefineFunction(internal::kSinFn, internal::SinValue);
  terms.DefineFunction(internal::kLessFn, internal::LessValue);
  terms.DefineFunction(internal::kLessEqualFn, internal::LessEqualValue);
  terms.DefineFunction(internal::kStepFn, internal::StepValue);
  terms.DefineFunction(internal::kTruncFn, internal::TruncValue);
}

namespace internal {

absl::Status WithOpName(ir::OpKind kind, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("op '", ir::OpKindName(kind), "': ", status.message()));
}

SymTensor ZerosLike(smt::Terms& terms, const ir::TensorType& type) {
  SymTensor t;
  t.shape = type.shape;
  t.dtype = type.dtype;
  t.data.assign(static_cast<size_t>(type.shape.num_elements()), terms.Zero());
  return t;
}

std::vector<SymTensor> ZeroOutputs(smt::Terms& terms, absl::Span<const ir::TensorType> types) {
  std::vector<SymTensor> out;
  out.reserve(types.size());
  for (const ir::TensorType& type : types) out.push_back(ZerosLike(terms, type));
  return out;
}

int64_t LastDim(const ir::Shape& shape) {
  return shape.rank() == 0 ? 1 : shape.dim(shape.rank() - 1);
}

int64_t NumRows(const ir::Shape& shape) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < shape.rank(); ++d) rows *= shape.dim(d);
  return rows;
}

std::vector<smt::TermId> Slice(const SymTensor& t, int64_t offset, int64_t n) {
  return std::vector<smt::TermId>(t.data.begin() + offset, t.data.begin() + offset + n);
}

smt::TermId Exp(smt::Terms& terms, smt::TermId x) { return terms.Fn("exp", {x}); }
smt::TermId Log(smt::Terms& terms, smt::TermId x) { return terms.Fn("log", {x}); }
smt::TermId Sqrt(smt::Terms& terms, smt::TermId x) { return terms.Fn("sqrt", {x}); }

smt::TermId Min(smt::Terms& terms, smt::TermId a, smt::TermId b) {
  return terms.Neg(terms.Max({terms.Neg(a), terms.Neg(b)}));
}

smt::TermId Mean(smt::Terms& terms, absl::Span<const smt::TermId> row) {
  return terms.Mul(terms.Sum(row), terms.Rational(1, static_cast<int64_t>(row.size())));
}

smt::TermId LogSumExp(smt::Terms& terms, absl::Span<const smt::TermId> row) {
  const smt::TermId m = terms.Max(row);
  std::vector<smt::TermId> shifted;
  shifted.reserve(row.size());
  for (smt::TermId x : row) shifted.push_back(Exp(terms, terms.Sub(x, m)));
  return terms.Add(m, Log(terms, terms.Sum(shifted)));
}

std::vector<smt::TermId> Softmax(smt::Terms& terms, absl::Span<const smt::TermId> row) {
  const smt::TermId m = terms.Max(row);
  std::vector<smt::TermId> e;
  e.reserve(row.size());
  for (smt::TermId x : row) e.push_back(Exp(terms, terms.Sub(x, m)));
  const smt::TermId inv_total = terms.Inv(terms.Sum(e));
  for (smt::TermId& x : e) x = terms.Mul(x, inv_total);
  return e;
}

smt::TermId MergedLogSumExp(smt::Terms& terms, absl::Span<const smt::TermId> lses) {
  std::vector<smt::TermId> weights;
  for (smt::TermId l : lses) weights.push_back(Exp(terms, l));
  return Log(terms, terms.Sum(weights));
}

smt::TermId MergedValue(smt::Terms& terms, absl::Span<const smt::TermId> values,
                        absl::Span<const smt::TermId> lses) {
  std::vector<smt::TermId> weights, weighted;
  for (size_t i = 0; i < lses.size(); ++i) {
    weights.push_back(Exp(terms, lses[i]));
    weighted.push_back(terms.Mul(values[i], weights.back()));
  }
  return terms.Mul(terms.Sum(weighted), terms.Inv(terms.Sum(weights)));
}

smt::TermId Select(smt::Terms& terms, smt::TermId index, absl::Span<const smt::TermId> values,
                   int64_t offset) {
  std::vector<smt::TermId> picked;
  picked.reserve(values.size());
  for (size_t v = 0; v < values.size(); ++v) {
    picked.push_back(
        terms.Mul(terms.Indicator(index, terms.Int(static_cast<int64_t>(v) + offset)), values[v]));
  }
  return terms.Sum(picked);
}

absl::StatusOr<bool> FlagAttr(const ir::AttrMap& attrs, absl::string_view name,
                              int64_t default_value) {
  LOOM_ASSIGN_OR_RETURN(int64_t value, attrs.GetInt(name, default_value));
  if (value != 0 && value != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' is ", value, ", expected 0 or 1"));
  }
  return value == 1;
}

double CosValue(absl::Span<const double> args) {
  return args.size() == 1 ? std::cos(args[0]) : std::nan("");
}
double SinValue(absl::Span<const double> args) {
  return args.size() == 1 ? std::sin(args[0]) : std::nan("");
}
double LessValue(absl::Span<const double> args) {
  return args.size() == 2 ? static_cast<double>(args[0] < args[1]) : std::nan("");
}
double LessEqualValue(absl::Span<const double> args) {
  return args.size() == 2 ? static_cast<double>(args[0] <= args[1]) : std::nan("");
}
double StepValue(absl::Span<const double> args) {
  return args.size() == 1 ? static_cast<double>(args[0] > 0) : std::nan("");
}
double TruncValue(absl::Span<const double> args) {
  return args.size() == 1 ? std::trunc(args[0]) : std::nan("");
}

double ArgMaxValue(absl::Span<const double> args) {
  size_t best = 0;
  for (size_t k = 1; k < args.size(); ++k) {
    if (args[k] > args[best]) best = k;
  }
  return static_cast<double>(best);
}

double TopKIndexValue(absl::Span<const double> args) {
  if (args.size() < 2) return std::nan("");
  const double j = args[0];
  absl::Span<const double> s = args.subspan(1);
  if (!(j >= 0 && j < static_cast<double>(s.size()))) return std::nan("");
  std::vector<int64_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&s](int64_t a, int64_t b) { return s[a] > s[b]; });
  return static_cast<double>(order[static_cast<size_t>(j)]);
}

}  // namespace internal
}  // namespace loom::verify
