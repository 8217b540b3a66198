// Kernels of the row-wise ops; the contracts are in rowwise_kernels.h.
//
// Layout: one block per row of the last dim (a grid-stride loop over rows when there
// are more rows than blocks), each thread striding over the row, block reductions in
// double through warp shuffles and 32 doubles of shared memory. Sums over rows
// (dgamma, dbeta, the loss, embedding rows) use a second, fixed-order pass over
// scratch memory instead of atomics, so every result is deterministic.

#include "exec/cuda/rowwise_kernels.h"

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstddef>
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

namespace loom::exec::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;
constexpr int kMaxRowThreads = 512;               // threads of a per-row block
constexpr int kReduceThreads = 1024;              // threads of a single-block reduction
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // more work loops inside the kernel

// Column pass of the norm gradients: blocks of kColThreads columns by kColRows rows.
constexpr int kColThreads = 32;
constexpr int kColRows = 8;
constexpr int64_t kColTargetBlocks = 1024;  // enough blocks to fill a large GPU
constexpr int64_t kColMinChunkRows = 32;    // rows a block handles at least
constexpr int64_t kColMaxChunks = 65535;    // gridDim.y limit

// ---- host helpers -------------------------------------------------------------

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows and row length of a [..., n] tensor (a scalar is one row of one element).
struct RowShape {
  int64_t rows = 1;
  int64_t n = 1;
};

RowShape RowsOf(const DeviceTensor& t) {
  if (t.rank == 0) return RowShape{};
  return RowShape{t.Product(0, t.rank - 1), t.dims[t.rank - 1]};
}

// Threads of a per-row block: a power of two covering `n` (a multiple of the warp
// size), at most kMaxRowThreads.
int RowThreads(int64_t n) {
  int threads = kWarp;
  while (threads < kMaxRowThreads && threads < n) threads *= 2;
  return threads;
}

// Blocks for `work` independent units, capped; kernels loop over the rest.
unsigned Blocks(int64_t work) {
  return static_cast<unsigned>(work < kMaxBlocks ? work : kMaxBlocks);
}

size_t AlignUp(size_t bytes) {
  constexpr size_t kAlign = 256;
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// Scratch memory from the stream-ordered allocator, carved into aligned pieces and
// freed on the same stream (after the kernels that use it, in stream order).
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch() { Free(); }
  // Allocates `bytes` (> 0) at once; pieces are then taken with Take.
  cudaError_t Allocate(size_t bytes) {
    return cudaMallocAsync(reinterpret_cast<void**>(&base_), bytes, stream_);
  }
  // The next `count` elements of type U, aligned. The caller sized Allocate for them.
  template <typename U>
  U* Take(size_t count) {
    U* p = reinterpret_cast<U*>(base_ + used_);
    used_ += AlignUp(count * sizeof(U));
    return p;
  }
  cudaError_t Free() {
    char* base = base_;
    base_ = nullptr;
    return base != nullptr ? cudaFreeAsync(base, stream_) : cudaSuccess;
  }

 private:
  cudaStream_t stream_;
  char* base_ = nullptr;
  size_t used_ = 0;
};

// The first failure of `launch` and freeing `scratch`.
cudaError_t FirstError(cudaError_t launch, StreamScratch& scratch) {
  cudaError_t freed = scratch.Free();
  return launch != cudaSuccess ? launch : freed;
}

// ---- device helpers -------------------------------------------------------------

__device__ __forceinline__ double MaxOf(double a, double b) {
  return a < b ? b : a;  // std::max(a, b): keeps `a` when either is NaN
}

// Sum (kMax false) or max (kMax true, NaN ignored as in the reference's RowMax) over
// a warp by butterfly: every lane ends with the same, bit-identical value.
template <bool kMax>
__device__ __forceinline__ double WarpReduce(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const double other = __shfl_xor_sync(kFullMask, v, o);
    v = kMax ? MaxOf(v, other) : v + other;
  }
  return v;
}

// WarpReduce over the block, returned to every thread. blockDim.x is a multiple of
// the warp size; `shared` holds 32 doubles. Safe to call back to back.
template <bool kMax>
__device__ double BlockReduce(double v, double* shared) {
  v = WarpReduce<kMax>(v);
  const int lane = threadIdx.x % kWarp;
  __syncthreads();  // readers of the previous reduction are done with `shared`
  if (lane == 0) shared[threadIdx.x / kWarp] = v;
  __syncthreads();
  const double identity = kMax ? -CUDART_INF : 0.0;
  v = lane < static_cast<int>(blockDim.x / kWarp) ? shared[lane] : identity;
  return WarpReduce<kMax>(v);
}

__device__ __forceinline__ double BlockSum(double v, double* shared) {
  return BlockReduce<false>(v, shared);
}

// The row max m of x[0, n) (-infinity for an empty row) and sum(exp(x - m)).
struct ExpSum {
  double max;
  double sum;
};

template <typename T>
__device__ ExpSum RowExpSum(const T* x, int64_t n, double* shared) {
  double m = -CUDART_INF;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = MaxOf(m, static_cast<double>(x[j]));
  m = BlockReduce<true>(m, shared);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp(static_cast<double>(x[j]) - m);
  return ExpSum{m, BlockSum(s, shared)};
}

// log(sum(exp(x))) over one row, shifted by the row max (reference LogSumExp).
template <typename T>
__device__ double RowLogSumExp(const T* x, int64_t n, double* shared) {
  const ExpSum e = RowExpSum(x, n, shared);
  return e.max + log(e.sum);
}

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
    s.mean = BlockSum(sum, shared) / n;
  }
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double c = kCentered ? static_cast<double>(x[j]) - s.mean : static_cast<double>(x[j]);
    sq += c * c;
  }
  s.rstd = 1.0 / sqrt(BlockSum(sq, shared) / n + eps);
  return s;
}

template <bool kCentered>
__device__ __forceinline__ double Normalised(double x, const RowStats& s) {
  return kCentered ? (x - s.mean) * s.rstd : x * s.rstd;
}

// Class index of target `t` in a vocabulary of `v` entries: -1 unless t is an integer
// in [0, v) (the reference's Target check).
__device__ __forceinline__ int64_t ClassIndex(double t, int64_t v) {
  return t >= 0 && t < static_cast<double>(v) && t == floor(t) ? static_cast<int64_t>(t) : -1;
}

// Column of target `t` in a piece of `v` entries starting at `vocab_begin`, or -1
// (reference KernelPick / KernelPickGrad).
__device__ __forceinline__ int64_t PickColumn(double t, int64_t v, int64_t vocab_begin) {
  if (vocab_begin == kNoVocabBegin) return ClassIndex(t, v);
  const double local = t - static_cast<double>(vocab_begin);
  return local >= 0 && local < static_cast<double>(v) ? static_cast<int64_t>(local) : -1;
}

// Table row of `id` for a table of `rows` rows, or -1 (reference TableRows; the ids
// it rejects map to -1 too).
__device__ __forceinline__ int64_t TableRow(double id, int64_t rows, int64_t vocab_begin) {
  if (vocab_begin == kNoVocabBegin) return ClassIndex(id, rows);
  if (!(id >= 0) || id != floor(id)) return -1;
  const double local = id - static_cast<double>(vocab_begin);
  return local >= 0 && local < static_cast<double>(rows) ? static_cast<int64_t>(local) : -1;
}

// ---- normalisation kernels ------------------------------------------------------

// LayerNorm: y = (x - mean) * rstd * gamma + beta. RMSNorm: y = x * rstd * gamma.
template <typename T, bool kCentered>
__global__ void __launch_bounds__(kMaxRowThreads)
    NormKernel(const T* x, const T* gamma, const T* beta, int64_t rows, int64_t d, double eps,
               T* y) {
  __shared__ double shared[kWarp];
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
__global__ void __launch_bounds__(kMaxRowThreads)
    NormGradKernel(const T* x, const T* gamma, const T* dy, int64_t rows, int64_t d, double eps,
                   T* dx, double* stats) {
  __shared__ double shared[kWarp];
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
    const double mean_g = kCentered ? BlockSum(sum_g, shared) / n : 0.0;
    const double mean_gx = BlockSum(sum_gx, shared) / n;
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

// ---- softmax kernels ------------------------------------------------------------

// softmax: y = exp(x - max) / sum; log_softmax: y = x - logsumexp(x).
template <typename T, bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    SoftmaxKernel(const T* x, int64_t rows, int64_t n, T* y) {
  __shared__ double shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    const ExpSum e = RowExpSum(row, n, shared);
    const double lse = e.max + log(e.sum);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double v = static_cast<double>(row[j]);
      y[r * n + j] = static_cast<T>(kLog ? v - lse : exp(v - e.max) / e.sum);
    }
  }
}

// softmax_grad: dx = y * (dy - sum(y * dy)); log_softmax_grad: dx = dy - exp(y) * sum(dy).
template <typename T, bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    SoftmaxGradKernel(const T* y, const T* dy, int64_t rows, int64_t n, T* dx) {
  __shared__ double shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double g = static_cast<double>(dy[base + j]);
      sum += kLog ? g : static_cast<double>(y[base + j]) * g;
    }
    sum = BlockSum(sum, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double yv = static_cast<double>(y[base + j]);
      const double g = static_cast<double>(dy[base + j]);
      dx[base + j] = static_cast<T>(kLog ? g - exp(yv) * sum : yv * (g - sum));
    }
  }
}

// ---- loss kernels ----------------------------------------------------------------

// row_loss[r] = logsumexp(logits[r]) - logits[r, target], 0 for an invalid target.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyRowKernel(const T* logits, const T* targets, int64_t rows, int64_t v,
                          double* row_loss) {
  __shared__ double shared[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = ClassIndex(static_cast<double>(targets[r]), v);  // same in every thread
    if (t < 0) {
      if (threadIdx.x == 0) row_loss[r] = 0.0;
      continue;
    }
    const T* row = logits + r * v;
    const double lse = RowLogSumExp(row, v, shared);
    if (threadIdx.x == 0) row_loss[r] = lse - static_cast<double>(row[t]);
  }
}

// loss[0] = sum of row_loss / count; a single block.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    CrossEntropyTotalKernel(const double* row_loss, int64_t rows, int64_t count, T* loss) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  sum = BlockSum(sum, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(sum / static_cast<double>(count));
}

// dlogits = (softmax(logits) - onehot(target)) * dloss / count; invalid-target rows
// stay zero.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyGradKernel(const T* logits, const T* targets, const T* dloss, int64_t rows,
                           int64_t v, int64_t count, T* dlogits) {
  __shared__ double shared[kWarp];
  const double scale = static_cast<double>(dloss[0]) / static_cast<double>(count);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = ClassIndex(static_cast<double>(targets[r]), v);
    if (t < 0) continue;
    const T* row = logits + r * v;
    const double lse = RowLogSumExp(row, v, shared);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const double p = exp(static_cast<double>(row[j]) - lse);
      dlogits[r * v + j] = static_cast<T>((p - (j == t ? 1.0 : 0.0)) * scale);
    }
  }
}

// With col the target's column in this piece, when there is one: pick copies
// src = x [rows, v] at [p, col] to dst = y [rows]; pick_grad (kGrad) copies src = dy
// [rows] to dst = dx [rows, v] at [p, col].
template <typename T, bool kGrad>
__global__ void PickKernel(const T* src, const T* targets, int64_t rows, int64_t v,
                           int64_t vocab_begin, T* dst) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < rows;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = PickColumn(static_cast<double>(targets[p]), v, vocab_begin);
    if (col >= 0) dst[kGrad ? p * v + col : p] = src[kGrad ? p : p * v + col];
  }
}

// ---- embedding kernels ------------------------------------------------------------

// out[p, :] = table[row(p), :]; one block per position.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    EmbeddingKernel(const T* ids, const T* table, int64_t positions, int64_t table_rows, int64_t d,
                    int64_t vocab_begin, T* out) {
  for (int64_t p = blockIdx.x; p < positions; p += gridDim.x) {
    const int64_t row = TableRow(static_cast<double>(ids[p]), table_rows, vocab_begin);
    if (row < 0) continue;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[p * d + j] = table[row * d + j];
  }
}

// Sort keys of embedding_grad: keys[p] = the table row of position p, or `sentinel`
// (= table_rows, sorted last) when it has none; positions[p] = p.
template <typename T>
__global__ void EmbeddingGradKeysKernel(const T* ids, int64_t positions, int64_t table_rows,
                                        int64_t vocab_begin, uint32_t* keys,
                                        uint32_t* position_of) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < positions;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = TableRow(static_cast<double>(ids[p]), table_rows, vocab_begin);
    keys[p] = static_cast<uint32_t>(row >= 0 ? row : table_rows);
    position_of[p] = static_cast<uint32_t>(p);
  }
}

// With positions stably sorted by table row: the block at the first entry i of each
// run of one row sums dy over the run, in increasing position order (the reference's
// order), and stores it; every other block does nothing.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    EmbeddingGradRowsKernel(const uint32_t* keys, const uint32_t* position_of, int64_t positions,
                            uint32_t sentinel, const T* dy, int64_t d, T* dtable) {
  for (int64_t i = blockIdx.x; i < positions; i += gridDim.x) {
    const uint32_t key = keys[i];
    if (key == sentinel || (i > 0 && keys[i - 1] == key)) continue;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double total = 0.0;
      for (int64_t k = i; k < positions && keys[k] == key; ++k) {
        total += static_cast<double>(dy[static_cast<int64_t>(position_of[k]) * d + j]);
      }
      dtable[static_cast<int64_t>(key) * d + j] = static_cast<T>(total);
    }
  }
}

// ---- launch helpers ------------------------------------------------------------------

// Launches `kernel` with one block per row of `s`, and nothing for an empty tensor.
template <typename... Params, typename... Args>
cudaError_t RowLaunch(void (*kernel)(Params...), RowShape s, cudaStream_t stream, Args... args) {
  if (s.rows == 0 || s.n == 0) return cudaSuccess;
  kernel<<<Blocks(s.rows), RowThreads(s.n), 0, stream>>>(args...);
  return cudaGetLastError();
}

// The row pass (dx and row statistics), then the column pass over `chunks` row
// chunks into scratch, then the fixed-order sum of the chunks into dgamma (and dbeta).
template <typename T, bool kCentered>
cudaError_t NormGrad(const DeviceTensor& x, const DeviceTensor& gamma, const DeviceTensor& dy,
                     double eps, const DeviceTensor& dx, const DeviceTensor& dgamma,
                     const DeviceTensor* dbeta, cudaStream_t stream) {
  const RowShape s = RowsOf(x);
  if (s.rows == 0 || s.n == 0) return cudaSuccess;  // parameter gradients stay zero
  const int64_t col_blocks = CeilDiv(s.n, kColThreads);
  int64_t chunks = CeilDiv(kColTargetBlocks, col_blocks);
  if (chunks > CeilDiv(s.rows, kColMinChunkRows)) chunks = CeilDiv(s.rows, kColMinChunkRows);
  if (chunks > kColMaxChunks) chunks = kColMaxChunks;
  const int64_t chunk_rows = CeilDiv(s.rows, chunks);
  chunks = CeilDiv(s.rows, chunk_rows);

  const int num_partials = dbeta != nullptr ? 2 : 1;
  StreamScratch scratch(stream);
  cudaError_t err =
      scratch.Allocate(AlignUp(2 * s.rows * sizeof(double)) +
                       num_partials * AlignUp(static_cast<size_t>(chunks * s.n) * sizeof(double)));
  if (err != cudaSuccess) return err;
  double* stats = scratch.Take<double>(2 * s.rows);
  double* partial_gamma = scratch.Take<double>(chunks * s.n);
  double* partial_beta = dbeta != nullptr ? scratch.Take<double>(chunks * s.n) : nullptr;

  NormGradKernel<T, kCentered><<<Blocks(s.rows), RowThreads(s.n), 0, stream>>>(
      x.as<T>(), gamma.as<T>(), dy.as<T>(), s.rows, s.n, eps, dx.as<T>(), stats);
  err = cudaGetLastError();
  if (err != cudaSuccess) return FirstError(err, scratch);

  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  NormParamGradPartialKernel<T, kCentered><<<grid, dim3(kColThreads, kColRows), 0, stream>>>(
      x.as<T>(), dy.as<T>(), stats, s.rows, s.n, chunk_rows, partial_gamma, partial_beta);
  err = cudaGetLastError();
  if (err != cudaSuccess) return FirstError(err, scratch);

  constexpr int kThreads = 256;
  const unsigned blocks = Blocks(CeilDiv(s.n, kThreads));
  SumChunksKernel<T><<<blocks, kThreads, 0, stream>>>(partial_gamma, chunks, s.n, dgamma.as<T>());
  err = cudaGetLastError();
  if (err == cudaSuccess && dbeta != nullptr) {
    SumChunksKernel<T><<<blocks, kThreads, 0, stream>>>(partial_beta, chunks, s.n, dbeta->as<T>());
    err = cudaGetLastError();
  }
  return FirstError(err, scratch);
}

template <typename T>
cudaError_t CrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets, int64_t count,
                         const DeviceTensor& loss, cudaStream_t stream) {
  const RowShape s = RowsOf(logits);
  if (s.rows == 0) return cudaSuccess;  // 0 / count: the zero-filled output
  StreamScratch scratch(stream);
  cudaError_t err = scratch.Allocate(AlignUp(s.rows * sizeof(double)));
  if (err != cudaSuccess) return err;
  double* row_loss = scratch.Take<double>(s.rows);
  CrossEntropyRowKernel<T><<<Blocks(s.rows), RowThreads(s.n), 0, stream>>>(
      logits.as<T>(), targets.as<T>(), s.rows, s.n, row_loss);
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    CrossEntropyTotalKernel<T>
        <<<1, kReduceThreads, 0, stream>>>(row_loss, s.rows, count, loss.as<T>());
    err = cudaGetLastError();
  }
  return FirstError(err, scratch);
}

constexpr int kPointThreads = 256;  // threads of the one-thread-per-position kernels

// pick (kGrad false) and pick_grad over `s`, the rows of x or dx.
template <typename T, bool kGrad>
cudaError_t Pick(const DeviceTensor& src, const DeviceTensor& targets, int64_t vocab_begin,
                 const DeviceTensor& dst, RowShape s, cudaStream_t stream) {
  if (s.rows == 0 || s.n == 0) return cudaSuccess;
  PickKernel<T, kGrad><<<Blocks(CeilDiv(s.rows, kPointThreads)), kPointThreads, 0, stream>>>(
      src.as<T>(), targets.as<T>(), s.rows, s.n, vocab_begin, dst.as<T>());
  return cudaGetLastError();
}

// Keys (table row per position), a stable radix sort of positions by key, then one
// fixed-order sum per table row.
template <typename T>
cudaError_t EmbeddingGrad(const DeviceTensor& ids, const DeviceTensor& dy, int64_t vocab_begin,
                          const DeviceTensor& dtable, cudaStream_t stream) {
  const int64_t positions = ids.size();
  const int64_t table_rows = dtable.dims[0];
  const int64_t d = dtable.dims[1];
  if (positions == 0 || table_rows == 0 || d == 0) return cudaSuccess;
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (positions >= kLimit || table_rows >= kLimit) return cudaErrorInvalidValue;
  const uint32_t sentinel = static_cast<uint32_t>(table_rows);
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t{1} << end_bit) <= sentinel) ++end_bit;
  const int n = static_cast<int>(positions);

  size_t sort_bytes = 0;
  uint32_t* none = nullptr;  // the size query reads no data
  cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, none, none, none, none, n,
                                                    0, end_bit, stream);
  if (err != cudaSuccess) return err;
  StreamScratch scratch(stream);
  err = scratch.Allocate(4 * AlignUp(positions * sizeof(uint32_t)) + AlignUp(sort_bytes));
  if (err != cudaSuccess) return err;
  uint32_t* keys_in = scratch.Take<uint32_t>(positions);
  uint32_t* keys_out = scratch.Take<uint32_t>(positions);
  uint32_t* positions_in = scratch.Take<uint32_t>(positions);
  uint32_t* positions_out = scratch.Take<uint32_t>(positions);
  void* sort_temp = scratch.Take<char>(sort_bytes);

  EmbeddingGradKeysKernel<T>
      <<<Blocks(CeilDiv(positions, kPointThreads)), kPointThreads, 0, stream>>>(
          ids.as<T>(), positions, table_rows, vocab_begin, keys_in, positions_in);
  err = cudaGetLastError();
  if (err != cudaSuccess) return FirstError(err, scratch);
  err = cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, positions_in,
                                        positions_out, n, 0, end_bit, stream);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return FirstError(err, scratch);
  EmbeddingGradRowsKernel<T><<<Blocks(positions), RowThreads(d), 0, stream>>>(
      keys_out, positions_out, positions, sentinel, dy.as<T>(), d, dtable.as<T>());
  return FirstError(cudaGetLastError(), scratch);
}

// ---- public launchers: dispatch on the element type -------------------------------

// launch(T{}) with T the element type of `t`.
template <typename Launch>
cudaError_t ByType(const DeviceTensor& t, Launch launch) {
  return t.f64 ? launch(double{}) : launch(float{});
}

}  // namespace

cudaError_t LaunchRmsNorm(const DeviceTensor& x, const DeviceTensor& gamma, double eps,
                          const DeviceTensor& y, cudaStream_t stream) {
  const RowShape s = RowsOf(x);
  return ByType(x, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(NormKernel<T, false>, s, stream, x.as<T>(), gamma.as<T>(),
                     static_cast<const T*>(nullptr), s.rows, s.n, eps, y.as<T>());
  });
}

cudaError_t LaunchRmsNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                              const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                              const DeviceTensor& dgamma, cudaStream_t stream) {
  return ByType(x, [&](auto t) {
    return NormGrad<decltype(t), false>(x, gamma, dy, eps, dx, dgamma, nullptr, stream);
  });
}

cudaError_t LaunchLayerNorm(const DeviceTensor& x, const DeviceTensor& gamma,
                            const DeviceTensor& beta, double eps, const DeviceTensor& y,
                            cudaStream_t stream) {
  const RowShape s = RowsOf(x);
  return ByType(x, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(NormKernel<T, true>, s, stream, x.as<T>(), gamma.as<T>(), beta.as<T>(), s.rows,
                     s.n, eps, y.as<T>());
  });
}

cudaError_t LaunchLayerNormGrad(const DeviceTensor& x, const DeviceTensor& gamma,
                                const DeviceTensor& dy, double eps, const DeviceTensor& dx,
                                const DeviceTensor& dgamma, const DeviceTensor& dbeta,
                                cudaStream_t stream) {
  return ByType(x, [&](auto t) {
    return NormGrad<decltype(t), true>(x, gamma, dy, eps, dx, dgamma, &dbeta, stream);
  });
}

cudaError_t LaunchSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) {
  const RowShape s = RowsOf(x);
  return ByType(x, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(SoftmaxKernel<T, false>, s, stream, x.as<T>(), s.rows, s.n, y.as<T>());
  });
}

cudaError_t LaunchLogSoftmax(const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) {
  const RowShape s = RowsOf(x);
  return ByType(x, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(SoftmaxKernel<T, true>, s, stream, x.as<T>(), s.rows, s.n, y.as<T>());
  });
}

cudaError_t LaunchSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy, const DeviceTensor& dx,
                              cudaStream_t stream) {
  const RowShape s = RowsOf(y);
  return ByType(y, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(SoftmaxGradKernel<T, false>, s, stream, y.as<T>(), dy.as<T>(), s.rows, s.n,
                     dx.as<T>());
  });
}

cudaError_t LaunchLogSoftmaxGrad(const DeviceTensor& y, const DeviceTensor& dy,
                                 const DeviceTensor& dx, cudaStream_t stream) {
  const RowShape s = RowsOf(y);
  return ByType(y, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(SoftmaxGradKernel<T, true>, s, stream, y.as<T>(), dy.as<T>(), s.rows, s.n,
                     dx.as<T>());
  });
}

cudaError_t LaunchCrossEntropy(const DeviceTensor& logits, const DeviceTensor& targets,
                               int64_t count, const DeviceTensor& loss, cudaStream_t stream) {
  return ByType(logits, [&](auto t) {
    return CrossEntropy<decltype(t)>(logits, targets, count, loss, stream);
  });
}

cudaError_t LaunchCrossEntropyGrad(const DeviceTensor& logits, const DeviceTensor& targets,
                                   const DeviceTensor& dloss, int64_t count,
                                   const DeviceTensor& dlogits, cudaStream_t stream) {
  const RowShape s = RowsOf(logits);
  return ByType(logits, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(CrossEntropyGradKernel<T>, s, stream, logits.as<T>(), targets.as<T>(),
                     dloss.as<T>(), s.rows, s.n, count, dlogits.as<T>());
  });
}

cudaError_t LaunchPick(const DeviceTensor& x, const DeviceTensor& targets, int64_t vocab_begin,
                       const DeviceTensor& y, cudaStream_t stream) {
  return ByType(x, [&](auto t) {
    return Pick<decltype(t), false>(x, targets, vocab_begin, y, RowsOf(x), stream);
  });
}

cudaError_t LaunchPickGrad(const DeviceTensor& targets, const DeviceTensor& dy, int64_t vocab_begin,
                           const DeviceTensor& dx, cudaStream_t stream) {
  return ByType(dx, [&](auto t) {
    return Pick<decltype(t), true>(dy, targets, vocab_begin, dx, RowsOf(dx), stream);
  });
}

// One block per position: a row of `d` entries.
cudaError_t LaunchEmbedding(const DeviceTensor& ids, const DeviceTensor& table, int64_t vocab_begin,
                            const DeviceTensor& out, cudaStream_t stream) {
  const RowShape s{ids.size(), table.dims[1]};
  return ByType(table, [&](auto t) {
    using T = decltype(t);
    return RowLaunch(EmbeddingKernel<T>, s, stream, ids.as<T>(), table.as<T>(), s.rows,
                     table.dims[0], s.n, vocab_begin, out.as<T>());
  });
}

cudaError_t LaunchEmbeddingGrad(const DeviceTensor& ids, const DeviceTensor& dy,
                                int64_t vocab_begin, const DeviceTensor& dtable,
                                cudaStream_t stream) {
  return ByType(dtable, [&](auto t) {
    return EmbeddingGrad<decltype(t)>(ids, dy, vocab_begin, dtable, stream);
  });
}

}  // namespace loom::exec::cuda
