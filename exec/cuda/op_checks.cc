#include "exec/cuda/op_checks.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "exec/cuda/check_kernels.h"
#include "exec/cuda/cuda_ops.h"
#include "exec/cuda/device_tensor.h"
#include "exec/cuda/vocab.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"

namespace loom::exec::cuda {

using ir::OpKind;

absl::Status CheckTensors(OpKind kind, absl::Span<const DeviceTensor> in, size_t min_inputs,
                          absl::Span<DeviceTensor> out, size_t num_outputs) {
  if (in.size() < min_inputs || out.size() < num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(ir::OpKindName(kind), " on the CUDA backend got ", in.size(), " inputs and ",
                     out.size(), " outputs, expected at least ", min_inputs, " and ", num_outputs));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " input ", i, " is ", in[i].f64 ? "f64" : "f32",
                       " but its output is ", out[0].f64 ? "f64" : "f32"));
    }
  }
  for (size_t i = 1; i < num_outputs; ++i) {
    if (out[i].f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " outputs mix element types"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCounts(OpKind kind, absl::Span<const DeviceTensor> in, size_t inputs,
                         absl::Span<DeviceTensor> out) {
  if (in.size() != inputs || out.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(ir::OpKindName(kind), " on the CUDA backend got ",
                                                   in.size(), " inputs and ", out.size(),
                                                   " outputs, expected ", inputs, " and 1"));
  }
  for (const DeviceTensor& t : in) {
    if (t.f64 != out[0].f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes element types"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOperands(OpKind kind, absl::Span<const DeviceTensor> in,
                           absl::Span<const DeviceTensor> out) {
  const ir::OpArity arity = ir::GetOpArity(kind);
  if (static_cast<int>(in.size()) < arity.min_inputs ||
      (arity.max_inputs >= 0 && static_cast<int>(in.size()) > arity.max_inputs) ||
      static_cast<int>(out.size()) != arity.num_outputs) {
    return absl::InvalidArgumentError(absl::StrCat(ir::OpKindName(kind), " got ", in.size(),
                                                   " inputs and ", out.size(), " outputs"));
  }
  const bool f64 = in.empty() ? out[0].f64 : in[0].f64;
  for (const DeviceTensor& t : in) {
    if (t.f64 != f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes float and double tensors"));
    }
  }
  for (const DeviceTensor& t : out) {
    if (t.f64 != f64) {
      return absl::InvalidArgumentError(
          absl::StrCat(ir::OpKindName(kind), " mixes float and double tensors"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckArity(OpKind kind, absl::Span<const DeviceTensor> in,
                        absl::Span<const DeviceTensor> out) {
  const ir::OpArity arity = ir::GetOpArity(kind);
  const int num_in = static_cast<int>(in.size());
  const int num_out = static_cast<int>(out.size());
  const bool inputs_ok =
      num_in >= arity.min_inputs && (arity.max_inputs < 0 || num_in <= arity.max_inputs);
  const bool outputs_ok = arity.num_outputs < 0 ? num_out >= 1 : num_out == arity.num_outputs;
  if (!inputs_ok || !outputs_ok || num_in == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ir::OpKindName(kind), " on the CUDA backend got ", num_in, " inputs and ", num_out,
        " outputs"));
  }
  const bool f64 = in[0].f64;
  for (const absl::Span<const DeviceTensor> side : {in, out}) {
    for (const DeviceTensor& t : side) {
      if (t.f64 != f64) {
        return absl::InvalidArgumentError(
            absl::StrCat(ir::OpKindName(kind), " on the CUDA backend mixes f32 and f64 tensors"));
      }
    }
  }
  return absl::OkStatus();
}

std::string DimsString(const DeviceTensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.dims, t.dims + t.rank, ","), "]");
}

absl::StatusOr<int> DimAttr(const ir::AttrMap& attrs, int rank) {
  LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.GetInt("dim"));
  absl::StatusOr<int> n = ir::NormalizeDim(dim, rank);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'dim': ", n.status().message()));
  }
  return *n;
}

absl::StatusOr<int64_t> VocabBegin(const ir::AttrMap& attrs) {
  if (!attrs.Has("vocab_begin")) return kNoVocabBegin;
  LOOM_ASSIGN_OR_RETURN(int64_t begin, attrs.GetInt("vocab_begin"));
  if (begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab_begin' is ", begin, ", expected at least 0"));
  }
  return begin;
}

absl::Status CheckVocab(const ir::AttrMap& attrs, const DeviceTensor& out, int dim) {
  LOOM_ASSIGN_OR_RETURN(int64_t vocab, attrs.GetInt("vocab"));
  if (vocab < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute 'vocab' is ", vocab, ", expected at least 1"));
  }
  const int64_t extent = dim >= 0 && dim < out.rank ? out.dims[dim] : -1;
  if (vocab != extent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute 'vocab' is ", vocab, " but the output has ", extent, " at dim ", dim));
  }
  return absl::OkStatus();
}

absl::Status CheckIndices(const DeviceTensor& ids, int64_t upper, const char* what,
                          cudaStream_t stream) {
  int64_t position = -1;
  double value = 0;
  if (absl::Status s = CudaError(FindBadIndex(ids, upper, stream, &position, &value), what);
      !s.ok()) {
    return s;
  }
  if (position < 0) return absl::OkStatus();
  if (upper > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", value, " at position ", position,
                                                   " is outside [0, ", upper, ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", value, " at position ", position, " is not a non-negative integer"));
}

}  // namespace loom::exec::cuda
