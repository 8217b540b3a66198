#include "exec/cpu_kernels.h"

#include <cblas.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "exec/cpu_attention.h"
#include "exec/host_ops.h"
#include "ir/op_schema.h"
#include "ir/ops/element_index.h"
#include "ir/status_macros.h"

namespace loom::exec {
namespace {

using ir::HostTensor;

// C[m, n] = op(A) op(B), row-major, op = transpose when asked.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
          float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), 0.0f, c,
              static_cast<int>(n));
}
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, const double* b,
          double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), 0.0, c,
              static_cast<int>(n));
}

// The operands of one product in the element type T (a copy for float).
template <typename T>
struct Operand {
  std::vector<T> copy;
  const T* data = nullptr;
};

template <typename T>
Operand<T> AsType(const HostTensor& t) {
  Operand<T> o;
  if constexpr (std::is_same_v<T, double>) {
    o.data = t.data.data();
  } else {
    o.copy.assign(t.data.begin(), t.data.end());
    o.data = o.copy.data();
  }
  return o;
}

template <typename T>
void Store(const std::vector<T>& from, HostTensor& to) {
  to.data.assign(from.begin(), from.end());
}

// linear: y[rows, out] = x[rows, in] w[out, in]^T (+ bias).
template <typename T>
void Linear(absl::Span<const HostTensor* const> in, HostTensor& y) {
  const HostTensor& x = *in[0];
  const HostTensor& w = *in[1];
  const int64_t rows = ir::ops::DimProduct(x.shape, 0, x.shape.rank() - 1);
  const int64_t n_out = w.shape.dim(0);
  const int64_t n_in = w.shape.dim(1);
  Operand<T> a = AsType<T>(x);
  Operand<T> b = AsType<T>(w);
  std::vector<T> c(rows * n_out);
  Gemm(false, true, rows, n_out, n_in, a.data, b.data, c.data());
  if (in.size() == 3) {
    const HostTensor& bias = *in[2];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < n_out; ++o) c[r * n_out + o] += static_cast<T>(bias[o]);
    }
  }
  Store(c, y);
}

// linear_wgrad: dw[out, in] = dy[rows, out]^T x[rows, in].
template <typename T>
void LinearWGrad(absl::Span<const HostTensor* const> in, HostTensor& dw) {
  const HostTensor& dy = *in[0];
  const HostTensor& x = *in[1];
  const int rank = dy.shape.rank();
  const int64_t rows = ir::ops::DimProduct(dy.shape, 0, rank - 1);
  const int64_t n_out = dy.shape.dim(rank - 1);
  const int64_t n_in = x.shape.dim(x.shape.rank() - 1);
  Operand<T> a = AsType<T>(dy);
  Operand<T> b = AsType<T>(x);
  std::vector<T> c(n_out * n_in);
  Gemm(true, false, n_out, n_in, rows, a.data, b.data, c.data());
  Store(c, dw);
}

// matmul: y[..., m, n] = a[..., m, k] b[..., k, n] (b may be unbatched).
template <typename T>
void MatMul(absl::Span<const HostTensor* const> in, HostTensor& y) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  const ir::ops::MatMulDims d = ir::ops::MatMulDimsOf(a.shape, b.shape);
  const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
  Operand<T> pa = AsType<T>(a);
  Operand<T> pb = AsType<T>(b);
  std::vector<T> c(batch * m * n);
  for (int64_t p = 0; p < batch; ++p) {
    Gemm(false, false, m, n, k, pa.data + p * m * k, pb.data + d.b_offset(p),
         c.data() + p * m * n);
  }
  Store(c, y);
}

bool IsMatmul(ir::OpKind kind) {
  return kind == ir::OpKind::kLinear || kind == ir::OpKind::kLinearWGrad ||
         kind == ir::OpKind::kMatMul;
}

template <typename T>
void RunMatmul(ir::OpKind kind, absl::Span<const HostTensor* const> in, HostTensor& out) {
  switch (kind) {
    case ir::OpKind::kLinear:
      Linear<T>(in, out);
      break;
    case ir::OpKind::kLinearWGrad:
      LinearWGrad<T>(in, out);
      break;
    default:
      MatMul<T>(in, out);
      break;
  }
}

}  // namespace

void RoundToPrecision(HostTensor& t, ir::DType precision) {
  if (precision != ir::DType::kF32 || !ir::IsFloat(t.dtype)) return;
  for (double& x : t.data) x = static_cast<float>(x);
}

absl::Status RunTaskKernel(const ir::Task& task, absl::Span<const HostTensor* const> in,
                           ir::DType precision, std::vector<HostTensor>& out,
                           MatmulStats* stats) {
  std::vector<ir::TensorType> types;
  types.reserve(in.size());
  for (const HostTensor* t : in) types.push_back({t->shape, t->dtype});
  absl::StatusOr<std::vector<ir::TensorType>> inferred =
      ir::InferOutputTypes(task.kind, types, task.attrs);
  if (!inferred.ok()) return PlanError(DescribeTask(task), inferred.status().message());
  out.clear();
  for (const ir::TensorType& type : *inferred) out.emplace_back(type.shape, type.dtype);
  if (task.kind == ir::OpKind::kAttention || task.kind == ir::OpKind::kAttentionGrad) {
    absl::Status s = task.kind == ir::OpKind::kAttention
                         ? CpuAttention(in, task.attrs, precision, absl::MakeSpan(out))
                         : CpuAttentionGrad(in, task.attrs, precision, absl::MakeSpan(out));
    if (!s.ok()) return PlanError(DescribeTask(task), s.message());
  } else if (IsMatmul(task.kind)) {
    const auto start = std::chrono::steady_clock::now();
    if (precision == ir::DType::kF32) {
      RunMatmul<float>(task.kind, in, out[0]);
    } else {
      RunMatmul<double>(task.kind, in, out[0]);
    }
    if (stats != nullptr) {
      stats->seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats->flops += ir::GetOpSchema(task.kind).flops(types, *inferred, task.attrs);
    }
  } else {
    absl::Status s = ir::GetOpSchema(task.kind).kernel(in, task.attrs, absl::MakeSpan(out));
    if (!s.ok()) return PlanError(DescribeTask(task), s.message());
  }
  for (HostTensor& t : out) RoundToPrecision(t, precision);
  return absl::OkStatus();
}

void UseSingleThreadedBlas() { openblas_set_num_threads(1); }

double MeasureSgemmPeak(int n, int repeats) {
  UseSingleThreadedBlas();
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  Gemm(false, false, n, n, n, a.data(), b.data(), c.data());  // warm-up
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    Gemm(false, false, n, n, n, a.data(), b.data(), c.data());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s);
  }
  return best;
}

}  // namespace loom::exec
