// Symbolic kernels of the index family (reference kernels: ir/ops/index.cc).
//
// arange's elements are start + i step, exact; cumsum's are running sums. A
// gather by index tensors sums, over every row an index may name, the indicator
// of the index times that row (an index may also count from the end, as the
// kernel's).

#include <cmath>
#include <string>
#include <vector>

#include "ir/attributes.h"
#include "ir/ops/element_index.h"
#include "ir/ops/op_util.h"
#include "verify/sym_elements.h"
#include "verify/sym_formulas.h"
#include "verify/sym_ops_internal.h"

namespace loom::verify::internal {
namespace {

Outputs Arange(Terms& t, Inputs, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<double> start = attrs.GetFloat("start");
  if (!start.ok()) return OpError("arange", start.status());
  absl::StatusOr<double> step = attrs.GetFloat("step");
  if (!step.ok()) return OpError("arange", step.status());
  if (!std::isfinite(*start) || !std::isfinite(*step)) {
    return absl::InvalidArgumentError("op 'arange': start and step must be finite");
  }
  SymTensor y = FilledLike(out_types[0], t.Zero());
  for (size_t i = 0; i < y.data.size(); ++i) {
    y.data[i] = t.Add(t.Double(*start), t.Mul(t.Int(static_cast<int64_t>(i)), t.Double(*step)));
  }
  return std::vector<SymTensor>{std::move(y)};
}

Outputs Cumsum(Terms& t, Inputs in, const ir::AttrMap& attrs, OutTypes out_types) {
  absl::StatusOr<int64_t> d = attrs.GetInt("dim");
  if (!d.ok()) return OpError("cumsum", d.status());
  const SymTensor& x = *in[0];
  absl::StatusOr<int> dim = ir::NormalizeDim(*d, x.shape.rank());
  if (!dim.ok()) return OpError("cumsum", dim.status());
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const int64_t outer = ir::ops::DimProduct(x.shape, 0, *dim);
  const int64_t n = x.shape.dim(*dim);
  const int64_t inner = ir::ops::DimProduct(x.shape, *dim + 1, x.shape.rank());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      TermId acc = t.Zero();
      for (int64_t k = 0; k < n; ++k) {
        const int64_t at = (o * n + k) * inner + i;
        acc = t.Add(acc, x.data[at]);
        y.data[at] = acc;
      }
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

// x[i0[p], ..., i{k-1}[p], r] as the sum over every addressed row a of
// prod_m [i_m[p] names a_m] x[a, r]; an index names row a as a or a - size.
Outputs Index(Terms& t, Inputs in, const ir::AttrMap&, OutTypes out_types) {
  const SymTensor& x = *in[0];
  const int k = static_cast<int>(in.size()) - 1;
  const std::vector<int64_t>& out_dims = out_types[0].shape.dims();
  const std::vector<int64_t> p_dims(out_dims.begin(), out_dims.end() - (x.shape.rank() - k));
  std::vector<std::vector<int64_t>> source;
  for (int m = 1; m <= k; ++m) {
    source.push_back(ir::ops::BroadcastSource(in[m]->shape.dims(), p_dims));
  }
  const int64_t rows = ir::ops::DimProduct(x.shape, 0, k);
  const int64_t rest = ir::ops::DimProduct(x.shape, k, x.shape.rank());
  SymTensor y = FilledLike(out_types[0], t.Zero());
  const int64_t positions = rest == 0 ? 0 : static_cast<int64_t>(y.data.size()) / rest;
  for (int64_t p = 0; p < positions; ++p) {
    // The indicator that position p's indices name row a, for each row a.
    std::vector<TermId> names(static_cast<size_t>(rows), t.One());
    for (int64_t a = 0; a < rows; ++a) {
      int64_t left = a;
      for (int m = k - 1; m >= 0; --m) {
        const int64_t size = x.shape.dim(m);
        const int64_t am = left % size;
        left /= size;
        const TermId id = in[m + 1]->data[source[m][p]];
        names[a] = t.Mul(names[a], t.Add(t.Indicator(id, t.Int(am)), t.Indicator(id, t.Int(am - size))));
      }
    }
    for (int64_t r = 0; r < rest; ++r) {
      std::vector<TermId> terms;
      for (int64_t a = 0; a < rows; ++a) terms.push_back(t.Mul(names[a], x.data[a * rest + r]));
      y.data[p * rest + r] = t.Sum(terms);
    }
  }
  return std::vector<SymTensor>{std::move(y)};
}

}  // namespace

std::vector<SymKernel> IndexSymKernels() {
  using ir::OpKind;
  return {
      {OpKind::kArange, Arange},
      {OpKind::kCumsum, Cumsum},
      {OpKind::kIndex, Index},
  };
}

}  // namespace loom::verify::internal
