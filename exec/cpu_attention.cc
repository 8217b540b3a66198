#include "exec/cpu_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ir/ops/op_attrs.h"

namespace loom::exec {
namespace {

using ir::HostTensor;

using Dims = ir::ops::AttentionDims;

absl::StatusOr<Dims> GetDims(absl::Span<const HostTensor* const> in, const ir::AttrMap& attrs) {
  std::vector<ir::TensorType> types;
  for (int i = 0; i < 3; ++i) types.push_back({in[i]->shape, in[i]->dtype});
  return ir::ops::GetAttentionDims(types, attrs);
}

// C = alpha op(A) op(B) + beta C, row-major with leading dimensions.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

template <typename T>
std::vector<T> Copy(const HostTensor& t) {
  return std::vector<T>(t.data.begin(), t.data.end());
}

// Scores scale Q K^T of one (batch, head): [s, t].
template <typename T>
void Scores(const Dims& d, const T* q, const T* k, std::vector<T>& p) {
  Gemm(false, true, d.s, d.t, d.dk, static_cast<T>(d.scale), q, d.hq * d.dk, k, d.hkv * d.dk,
       T(0), p.data(), d.t);
}

// P = softmax(scale Q K^T) of one (batch, head), the keys each query does not see
// masked, and each row's log-sum-exp (-inf for a row that sees no key): [s, t], [s].
template <typename T>
void Weights(const Dims& d, const T* q, const T* k, std::vector<T>& p, std::vector<T>& lse) {
  Scores(d, q, k, p);
  for (int64_t i = 0; i < d.s; ++i) {
    T* row = p.data() + i * d.t;
    const int64_t n = d.Visible(i);
    if (n == 0) {
      std::fill(row, row + d.t, T(0));
      lse[i] = -std::numeric_limits<T>::infinity();
      continue;
    }
    const T top = *std::max_element(row, row + n);
    T total = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - top);
      total += row[j];
    }
    for (int64_t j = 0; j < n; ++j) row[j] /= total;
    std::fill(row + n, row + d.t, T(0));
    lse[i] = top + std::log(total);
  }
}

template <typename T>
void Forward(const Dims& d, absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out) {
  const std::vector<T> q = Copy<T>(*in[0]), k = Copy<T>(*in[1]), v = Copy<T>(*in[2]);
  std::vector<T> o(out[0].data.size()), p(d.s * d.t), lse(d.s);
  const int64_t group = d.group();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / group;
      const T* qh = q.data() + (b * d.s * d.hq + h) * d.dk;
      const T* kg = k.data() + (b * d.t * d.hkv + g) * d.dk;
      const T* vg = v.data() + (b * d.t * d.hkv + g) * d.dv;
      Weights(d, qh, kg, p, lse);
      Gemm(false, false, d.s, d.dv, d.t, T(1), p.data(), d.t, vg, d.hkv * d.dv, T(0),
           o.data() + (b * d.s * d.hq + h) * d.dv, d.hq * d.dv);
      for (int64_t i = 0; i < d.s; ++i) out[1].data[(b * d.s + i) * d.hq + h] = lse[i];
    }
  }
  out[0].data.assign(o.begin(), o.end());
}

// With the forward's out o and log-sum-exp L: P = exp(scale Q K^T - L) on the keys
// each query sees, dv = P^T do, dP = do v^T, dS = P * (dP - rowsum(do * o) + dL),
// dq = scale dS k, dk = scale dS^T q (dL the log-sum-exp's gradient where given); kv
// gradients sum over the query heads of their group.
template <typename T>
void Backward(const Dims& d, absl::Span<const HostTensor* const> in, absl::Span<HostTensor> out) {
  const std::vector<T> q = Copy<T>(*in[0]), k = Copy<T>(*in[1]), v = Copy<T>(*in[2]),
                       o = Copy<T>(*in[3]), lse = Copy<T>(*in[4]), dout = Copy<T>(*in[5]);
  std::vector<T> dq(out[0].data.size()), dk(out[1].data.size()), dv(out[2].data.size());
  std::vector<T> p(d.s * d.t), dp(d.s * d.t);
  const int64_t group = d.group();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const int64_t g = h / group;
      const int64_t qo = (b * d.s * d.hq + h) * d.dk, ko = (b * d.t * d.hkv + g) * d.dk;
      const int64_t vo = (b * d.t * d.hkv + g) * d.dv, oo = (b * d.s * d.hq + h) * d.dv;
      Scores(d, q.data() + qo, k.data() + ko, p);
      Gemm(false, true, d.s, d.t, d.dv, T(1), dout.data() + oo, d.hq * d.dv, v.data() + vo,
           d.hkv * d.dv, T(0), dp.data(), d.t);
      for (int64_t i = 0; i < d.s; ++i) {
        T* pr = p.data() + i * d.t;
        T* dr = dp.data() + i * d.t;
        const T row_lse = lse[(b * d.s + i) * d.hq + h];
        T dot = in.size() > 6 ? -(*in[6])[(b * d.s + i) * d.hq + h] : T(0);
        for (int64_t x = 0; x < d.dv; ++x) {
          dot += dout[oo + i * d.hq * d.dv + x] * o[oo + i * d.hq * d.dv + x];
        }
        const int64_t n = d.Visible(i);
        for (int64_t j = 0; j < n; ++j) pr[j] = std::exp(pr[j] - row_lse);
        std::fill(pr + n, pr + d.t, T(0));
        for (int64_t j = 0; j < d.t; ++j) dr[j] = pr[j] * (dr[j] - dot);  // dS
      }
      Gemm(false, false, d.s, d.dk, d.t, static_cast<T>(d.scale), dp.data(), d.t, k.data() + ko,
           d.hkv * d.dk, T(0), dq.data() + qo, d.hq * d.dk);
      Gemm(true, false, d.t, d.dk, d.s, static_cast<T>(d.scale), dp.data(), d.t, q.data() + qo,
           d.hq * d.dk, T(1), dk.data() + ko, d.hkv * d.dk);
      Gemm(true, false, d.t, d.dv, d.s, T(1), p.data(), d.t, dout.data() + oo, d.hq * d.dv, T(1),
           dv.data() + vo, d.hkv * d.dv);
    }
  }
  out[0].data.assign(dq.begin(), dq.end());
  out[1].data.assign(dk.begin(), dk.end());
  out[2].data.assign(dv.begin(), dv.end());
}

}  // namespace

absl::Status CpuAttention(absl::Span<const HostTensor* const> in, const ir::AttrMap& attrs,
                          ir::DType precision, absl::Span<HostTensor> out) {
  auto d = GetDims(in, attrs);
  if (!d.ok()) return d.status();
  (void)precision;  // computed in double in both precisions (see the header)
  Forward<double>(*d, in, out);
  return absl::OkStatus();
}

absl::Status CpuAttentionGrad(absl::Span<const HostTensor* const> in, const ir::AttrMap& attrs,
                              ir::DType precision, absl::Span<HostTensor> out) {
  auto d = GetDims(in, attrs);
  if (!d.ok()) return d.status();
  (void)precision;
  Backward<double>(*d, in, out);
  return absl::OkStatus();
}

}  // namespace loom::exec
