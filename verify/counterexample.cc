#include "verify/counterexample.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/host_tensor.h"
#include "ir/op_schema.h"

namespace loom::verify {
namespace {

// Kernels run on tiny pieces only.
constexpr int64_t kMaxKernelElements = int64_t{1} << 20;

std::string Range(const ir::Interval& iv) {
  if (iv.size() == 1) return absl::StrCat(iv.begin);
  return absl::StrCat(iv.begin, "..", iv.end - 1);
}

std::string Index(const ir::Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const int64_t n = shape.dim(d);
    index[d] = n > 0 ? flat % n : 0;
    flat = n > 0 ? flat / n : 0;
  }
  return absl::StrCat("[", absl::StrJoin(index, ","), "]");
}

absl::StatusOr<std::vector<ir::HostTensor>> Run(ir::OpKind kind,
                                                const std::vector<KernelOperand>& operands,
                                                const ir::AttrMap& attrs) {
  std::vector<ir::HostTensor> in;
  std::vector<ir::TensorType> types;
  int64_t elements = 0;
  for (const KernelOperand& o : operands) {
    elements += o.shape.num_elements();
    if (elements > kMaxKernelElements) return absl::ResourceExhaustedError("too large");
    ir::HostTensor t(o.shape, o.dtype);
    if (ir::IsFloat(o.dtype)) {
      for (int64_t i = 0; i < t.size(); ++i) t[i] = 1.0 + static_cast<double>((i + o.tensor) % 7) / 8;
    }
    in.push_back(std::move(t));
    types.push_back({o.shape, o.dtype});
  }
  auto out_types = ir::InferOutputTypes(kind, types, attrs);
  if (!out_types.ok()) return out_types.status();
  std::vector<ir::HostTensor> out;
  for (const ir::TensorType& t : *out_types) {
    if (t.shape.num_elements() > kMaxKernelElements) return absl::ResourceExhaustedError("too large");
    out.emplace_back(t.shape, t.dtype);
  }
  std::vector<const ir::HostTensor*> ptrs;
  for (const ir::HostTensor& t : in) ptrs.push_back(&t);
  absl::Status s = ir::GetOpSchema(kind).kernel(ptrs, attrs, absl::MakeSpan(out));
  if (!s.ok()) return s;
  return out;
}

}  // namespace

std::string RegionExample(const std::string& tensor, const ir::Box& held, const ir::Box& wanted,
                          const std::string& held_words, const std::string& wanted_words) {
  for (size_t d = 0; d < held.size() && d < wanted.size(); ++d) {
    if (held[d] == wanted[d]) continue;
    std::vector<std::string> index(held.size(), "..");
    index[d] = "i";
    return absl::StrCat("with '", tensor, "'[", absl::StrJoin(index, ","), "] = i along dim ", d,
                        ": ", held_words, " i = ", Range(held[d]), " where ", wanted_words,
                        " i = ", Range(wanted[d]));
  }
  return absl::StrCat("'", tensor, "': ", held_words, " ", ir::BoxToString(held), " where ",
                      wanted_words, " ", ir::BoxToString(wanted));
}

std::string TensorExample(const std::string& held, const std::string& wanted,
                          const std::string& held_words, const std::string& wanted_words) {
  return absl::StrCat("with '", held, "' = 1 and '", wanted, "' = 2 everywhere: ", held_words,
                      " 1 where ", wanted_words, " 2");
}

std::string KernelExample(ir::OpKind kind, const std::vector<KernelOperand>& task_operands,
                          const ir::AttrMap& task_attrs,
                          const std::vector<KernelOperand>& spec_operands,
                          const ir::AttrMap& spec_attrs) {
  auto got = Run(kind, task_operands, task_attrs);
  auto want = Run(kind, spec_operands, spec_attrs);
  if (!got.ok() || !want.ok() || got->size() != want->size()) return "";
  for (size_t k = 0; k < got->size(); ++k) {
    const ir::HostTensor& a = (*got)[k];
    const ir::HostTensor& b = (*want)[k];
    if (!a.shape.SameDims(b.shape)) return "";
    for (int64_t i = 0; i < a.size(); ++i) {
      const double scale = std::max({1.0, std::abs(a[i]), std::abs(b[i])});
      if (std::abs(a[i] - b[i]) <= 1e-12 * scale) continue;
      return absl::StrCat("with inputs x[i] = 1 + ((i + t) mod 7) / 8 (t the tensor's id, 0 for "
                          "integer inputs): output ",
                          k, " at ", Index(a.shape, i), " is ", a[i], " where the spec's piece gives ",
                          b[i]);
    }
  }
  return "";
}

}  // namespace loom::verify
