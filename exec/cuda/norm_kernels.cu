// Kernels of the normalisations (norm_kernels.h), in the row layout of
// row_kernels.cuh. The parameter gradients sum over rows in a column pass over
// chunks of rows into scratch memory, then add the chunks in a fixed order.

#include "exec/cuda/norm_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "exec/cuda/row_kernels.cuh"

namespace loom::exec::cuda {
namespace {

// Column pass of the norm gradients: blocks of kColThreads columns by kColRows rows.
constexpr int kColThreads = 32;
constexpr int kColRows = 8;
constexpr int64_t kColTargetBlocks = 1024;  // enough blocks to fill a large GPU
constexpr int64_t kColMinChunkRows = 32;    // rows a block handles at least
constexpr int64_t kColMaxChunks = 65535;    // gridDim.y limit

// Normalisation statistics of one row: xhat = (x - mean) * rstd. Without centring
// (RMSNorm) mean is 0 and rstd = 1 / sqrt(mean(x^2) + eps); with it (LayerNorm)
// rstd = 1 / sqrt(biased variance + eps).
struct RowStats {
  double mean;
  double rstd;
};

template <bool kCentered, typename T>
__device__ RowStats NormStats(const T* x, int64_t d, double eps, double* shared) {
  const double n = static_cast<double>(d);
  RowStats s{0.0, 0.0};
  if (kCentered) {
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += static_cast<double>(x[j]);
    s.mean = rows::BlockSum(sum, shared) / n;
  }
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double c = kCentered ? static_cast<double>(x[j]) - s.mean : static_cast<double>(x[j]);
    sq += c * c;
  }
  s.rstd = 1.0 / sqrt(rows::BlockSum(sq, shared) / n + eps);
  return s;
}

template <bool kCentered>
__device__ __forceinline__ double Normalised(double x, const RowStats& s) {
  return kCentered ? (x - s.mean) * s.rstd : x * s.rstd;
}

// ---- normalisation kernels ------------------------------------------------------

// LayerNorm: y = (x - mean) * rstd * gamma + beta. RMSNorm: y = x * rstd * gamma.
template <typename T, bool kCentered>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    NormKernel(const T* x, const T* gamma, const T* beta, int64_t rows, int64_t d, double eps,
               T* y) {
  __shared__ double shared[rows::kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * d;
    const RowStats s = NormStats<kCentered>(row, d, eps, shared);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double v =
          Normalised<kCentered>(static_cast<double>(row[j]), s) * static_cast<double>(gamma[j]);
      if (kCentered) v += static_cast<double>(beta[j]);
      y[r * d + j] = static_cast<T>(v);
    }
  }
}

// dx of the norms, and each row's statistics into stats[2r] (mean), stats[2r + 1]
// (rstd) for the parameter-gradient pass. With g = dy * gamma:
// LayerNorm dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// RMSNorm dx = rstd * (g - xhat * mean(g * xhat)).
template <typename T, bool kCentered>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
    NormGradKernel(const T* x, const T* gamma, const T* dy, int64_t rows, int64_t d, double eps,
                   T* dx, double* stats) {
  __shared__ double shared[rows::kWarp];
  const double n = static_cast<double>(d);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * d;
    const T* dy_row = dy + r * d;
    const RowStats s = NormStats<kCentered>(row, d, eps, shared);
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xhat = Normalised<kCentered>(static_cast<double>(row[j]), s);
      const double g = static_cast<double>(dy_row[j]) * static_cast<double>(gamma[j]);
      sum_g += g;
      sum_gx += g * xhat;
    }
    const double mean_g = kCentered ? rows::BlockSum(sum_g, shared) / n : 0.0;
    const double mean_gx = rows::BlockSum(sum_gx, shared) / n;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double xhat = Normalised<kCentered>(static_cast<double>(row[j]), s);
      const double g = static_cast<double>(dy_row[j]) * static_cast<double>(gamma[j]);
      const double v =
          kCentered ? s.rstd * (g - mean_g - xhat * mean_gx) : s.rstd * (g - xhat * mean_gx);
      dx[r * d + j] = static_cast<T>(v);
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = s.mean;
      stats[2 * r + 1] = s.rstd;
    }
  }
}

// Partial parameter gradients over the rows [c * chunk_rows, (c + 1) * chunk_rows) of
// chunk c = blockIdx.y: partial_gamma[c, j] = sum dy * xhat, partial_beta[c, j] =
// sum dy (skipped when null). Block (kColThreads, kColRows).
template <typename T, bool kCentered>
__global__ void NormParamGradPartialKernel(const T* x, const T* dy, const double* stats,
                                           int64_t rows, int64_t d, int64_t chunk_rows,
                                           double* partial_gamma, double* partial_beta) {
  __shared__ double sum_gamma[kColRows][kColThreads];
  __shared__ double sum_beta[kColRows][kColThreads];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColThreads + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  double acc_gamma = 0.0, acc_beta = 0.0;
  if (j < d) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kColRows) {
      const RowStats s{stats[2 * r], stats[2 * r + 1]};
      const double g = static_cast<double>(dy[r * d + j]);
      acc_gamma += g * Normalised<kCentered>(static_cast<double>(x[r * d + j]), s);
      acc_beta += g;
    }
  }
  sum_gamma[threadIdx.y][threadIdx.x] = acc_gamma;
  sum_beta[threadIdx.y][threadIdx.x] = acc_beta;
  __syncthreads();
  if (threadIdx.y != 0 || j >= d) return;
  double total_gamma = 0.0, total_beta = 0.0;
  for (int k = 0; k < kColRows; ++k) {
    total_gamma += sum_gamma[k][threadIdx.x];
    total_beta += sum_beta[k][threadIdx.x];
  }
  partial_gamma[blockIdx.y * d + j] = total_gamma;
  if (partial_beta != nullptr) partial_beta[blockIdx.y * d + j] = total_beta;
}

// out[j] = sum over chunks c (in order) of partial[c, j], rounded once.
template <typename T>
__global__ void SumChunksKernel(const double* partial, int64_t chunks, int64_t d, T* out) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double total = 0.0;
    for (int64_t c = 0; c < chunks; ++c) total += partial[c * d + j];
    out[j] = static_cast<T>(total);
  }
}

// The row pass (dx and row statistics), then the column pass over `chunks` row
// chunks into scratch, then the fixed-order sum of the chunks into dgamma (and dbeta).
template <typename T, bool kCentered>
cudaError_t NormGrad(const DeviceTensor& x, const DeviceTensor& gamma, const DeviceTensor& dy,
                     double eps, const DeviceTensor& dx, const DeviceTensor& dgamma,
                     const DeviceTensor* dbeta, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(x);
  if (s.rows == 0 || s.n == 0) return cudaSuccess;  // parameter gradients stay zero
  const int64_t col_blocks = rows::CeilDiv(s.n, kColThreads);
  int64_t chunks = rows::CeilDiv(kColTargetBlocks, col_blocks);
  const int64_t max_chunks = rows::CeilDiv(s.rows, kColMinChunkRows);
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > kColMaxChunks) chunks = kColMaxChunks;
  const int64_t chunk_rows = rows::CeilDiv(s.rows, chunks);
  chunks = rows::CeilDiv(s.rows, chunk_rows);

  const int num_partials = dbeta != nullptr ? 2 : 1;
  rows::StreamScratch scratch(stream);
  const size_t partial_bytes = static_cast<size_t>(chunks * s.n) * sizeof(double);
  cudaError_t err = scratch.Allocate(rows::AlignUp(2 * s.rows * sizeof(double)) +
                                     num_partials * rows::AlignUp(partial_bytes));
  if (err != cudaSuccess) return err;
  double* stats = scratch.Take<double>(2 * s.rows);
  double* partial_gamma = scratch.Take<double>(chunks * s.n);
  double* partial_beta = dbeta != nullptr ? scratch.Take<double>(chunks * s.n) : nullptr;

  NormGradKernel<T, kCentered><<<rows::Blocks(s.rows), rows::RowThreads(s.n), 0, stream>>>(
      x.as<T>(), gamma.as<T>(), dy.as<T>(), s.rows, s.n, eps, dx.as<T>(), stats);
  err = cudaGetLastError();
  if (err != cudaSuccess) return rows::FirstError(err, scratch);

  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  NormParamGradPartialKernel<T, kCentered><<<grid, dim3(kColThreads, kColRows), 0, stream>>>(
      x.as<T>(), dy.as<T>(), stats, s.rows, s.n, chunk_rows, partial_gamma, partial_beta);
  err = cudaGetLastError();
  if (err != cudaSuccess) return rows::FirstError(err, scratch);

  constexpr int kThreads = 256;
  const unsigned blocks = rows::Blocks(rows::CeilDiv(s.n, kThreads));
  SumChunksKernel<T><<<blocks, kThreads, 0, stream>>>(partial_gamma, chunks, s.n, dgamma.as<T>());
  err = cudaGetLastError();
  if (err == cudaSuccess && dbeta != nullptr) {
    SumChunksKernel<T><<<blocks, kThreads, 0, stream>>>(partial_beta, chunks, s.n, dbeta->as<T>());
    err = cudaGetLastError();
  }
  return rows::FirstError(err, scratch);
}

}  // namespace

cudaError_t LaunchRmsNorm(const DeviceTensor& x, const DeviceTensor& gamma, double eps,
                          const DeviceTensor& y, cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(x);
  return rows::ByType(x, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(NormKernel<T, false>, s, stream, x.as<T>(), gamma.as<T>(),
                           static_cast<const T*>(nullptr), s.rows, s.n, eps, y.as<T>());
  });
}

cudaError_t LaunchRmsNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                              const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                              const DeviceTensor& dgamma, cudaStream_t stream) {
  return rows::ByType(x, [&](auto t) {
    return NormGrad<decltype(t), false>(x, gamma, dy, eps, dx, dgamma, nullptr, stream);
  });
}

cudaError_t LaunchLayerNorm(const DeviceTensor& x, const DeviceTensor& gamma,
                            const DeviceTensor& beta, double eps, const DeviceTensor& y,
                            cudaStream_t stream) {
  const rows::RowShape s = rows::RowsOf(x);
  return rows::ByType(x, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(NormKernel<T, true>, s, stream, x.as<T>(), gamma.as<T>(), beta.as<T>(),
                           s.rows, s.n, eps, y.as<T>());
  });
}

cudaError_t LaunchLayerNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                                const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                                const DeviceTensor& dgamma, const DeviceTensor& dbeta,
                                cudaStream_t stream) {
  return rows::ByType(x, [&](auto t) {
    return NormGrad<decltype(t), true>(x, gamma, dy, eps, dx, dgamma, &dbeta, stream);
  });
}

}  // namespace loom::exec::cuda
