#include "verify/sym_elements.h"

#include "absl/strings/str_cat.h"
#include "ir/ops/element_index.h"
#include "ir/ops/op_util.h"

namespace loom::verify::internal {

SymTensor FilledLike(const ir::TensorType& type, smt::TermId fill) {
  SymTensor t;
  t.shape = type.shape;
  t.dtype = type.dtype;
  t.data.assign(static_cast<size_t>(type.shape.num_elements()), fill);
  return t;
}

std::vector<SymTensor> FilledOutputs(absl::Span<const ir::TensorType> out_types, smt::TermId fill) {
  std::vector<SymTensor> out;
  out.reserve(out_types.size());
  for (const ir::TensorType& t : out_types) out.push_back(FilledLike(t, fill));
  return out;
}

void CopyAlongDim(const SymTensor& src, int64_t src_begin, SymTensor& dst, int64_t dst_begin,
                  int64_t count, int dim) {
  const int64_t outer = ir::ops::DimProduct(src.shape, 0, dim);
  const int64_t inner = ir::ops::DimProduct(src.shape, dim + 1, src.shape.rank());
  const int64_t src_n = src.shape.dim(dim);
  const int64_t dst_n = dst.shape.dim(dim);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < count; ++c) {
      for (int64_t j = 0; j < inner; ++j) {
        dst.data[(o * dst_n + dst_begin + c) * inner + j] =
            src.data[(o * src_n + src_begin + c) * inner + j];
      }
    }
  }
}

SymTensor MapElements(const SymTensor& x, const ir::TensorType& out_type,
                      const std::function<smt::TermId(smt::TermId)>& f) {
  SymTensor y;
  y.shape = out_type.shape;
  y.dtype = out_type.dtype;
  y.data.reserve(x.data.size());
  for (smt::TermId v : x.data) y.data.push_back(f(v));
  return y;
}

SymTensor MapElements2(const SymTensor& a, const SymTensor& b, const ir::TensorType& out_type,
                       const std::function<smt::TermId(smt::TermId, smt::TermId)>& f) {
  SymTensor y;
  y.shape = out_type.shape;
  y.dtype = out_type.dtype;
  const std::vector<int64_t>& dims = out_type.shape.dims();
  if (a.shape.dims() == dims && b.shape.dims() == dims) {
    y.data.reserve(a.data.size());
    for (size_t i = 0; i < a.data.size(); ++i) y.data.push_back(f(a.data[i], b.data[i]));
    return y;
  }
  const std::vector<int64_t> ia = ir::ops::BroadcastSource(a.shape.dims(), dims);
  const std::vector<int64_t> ib = ir::ops::BroadcastSource(b.shape.dims(), dims);
  y.data.reserve(ia.size());
  for (size_t i = 0; i < ia.size(); ++i) y.data.push_back(f(a.data[ia[i]], b.data[ib[i]]));
  return y;
}

absl::Status OpError(absl::string_view op, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("op '", op, "': ", status.message()));
}

}  // namespace loom::verify::internal
