// Kernels of the matrix-product family: bias rows for linear, and the embedding
// lookup with its gradient in the row layout of row_kernels.cuh (the gradient sorts
// positions by table row, then sums each row's positions in a fixed order).

#include "exec/cuda/matmul_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

#include "exec/cuda/row_kernels.cuh"

namespace loom::exec::cuda {
namespace {

// ---- bias ----------------------------------------------------------------------

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

template <typename T>
__global__ void AddBiasKernel(T* y, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

// ---- embedding -----------------------------------------------------------------

// Table row of `id` for a table of `rows` rows, or -1 (reference TableRows; the ids
// it rejects map to -1 too).
__device__ __forceinline__ int64_t TableRow(double id, int64_t rows, int64_t vocab_begin) {
  if (vocab_begin == kNoVocabBegin) return rows::ClassIndex(id, rows);
  if (!(id >= 0) || id != floor(id)) return -1;
  const double local = id - static_cast<double>(vocab_begin);
  return local >= 0 && local < static_cast<double>(rows) ? static_cast<int64_t>(local) : -1;
}

// out[p, :] = table[row(p), :]; one block per position.
template <typename T>
__global__ void __launch_bounds__(rows::kMaxRowThreads)
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
__global__ void __launch_bounds__(rows::kMaxRowThreads)
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
  rows::StreamScratch scratch(stream);
  err = scratch.Allocate(4 * rows::AlignUp(positions * sizeof(uint32_t)) +
                         rows::AlignUp(sort_bytes));
  if (err != cudaSuccess) return err;
  uint32_t* keys_in = scratch.Take<uint32_t>(positions);
  uint32_t* keys_out = scratch.Take<uint32_t>(positions);
  uint32_t* positions_in = scratch.Take<uint32_t>(positions);
  uint32_t* positions_out = scratch.Take<uint32_t>(positions);
  void* sort_temp = scratch.Take<char>(sort_bytes);

  const unsigned key_blocks = rows::Blocks(rows::CeilDiv(positions, rows::kPointThreads));
  EmbeddingGradKeysKernel<T><<<key_blocks, rows::kPointThreads, 0, stream>>>(
      ids.as<T>(), positions, table_rows, vocab_begin, keys_in, positions_in);
  err = cudaGetLastError();
  if (err != cudaSuccess) return rows::FirstError(err, scratch);
  err = cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, positions_in,
                                        positions_out, n, 0, end_bit, stream);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return rows::FirstError(err, scratch);
  EmbeddingGradRowsKernel<T><<<rows::Blocks(positions), rows::RowThreads(d), 0, stream>>>(
      keys_out, positions_out, positions, sentinel, dy.as<T>(), d, dtable.as<T>());
  return rows::FirstError(cudaGetLastError(), scratch);
}

}  // namespace

cudaError_t LaunchAddBias(void* y, const void* bias, int64_t rows, int64_t cols, bool f64,
                          cudaStream_t stream) {
  if (f64) {
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
        static_cast<double*>(y), static_cast<const double*>(bias), rows, cols);
  } else {
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
        static_cast<float*>(y), static_cast<const float*>(bias), rows, cols);
  }
  return cudaGetLastError();
}

// One block per position: a row of `d` entries.
cudaError_t LaunchEmbedding(const DeviceTensor& ids, const DeviceTensor& table, int64_t vocab_begin,
                            const DeviceTensor& out, cudaStream_t stream) {
  const rows::RowShape s{ids.size(), table.dims[1]};
  return rows::ByType(table, [&](auto t) {
    using T = decltype(t);
    return rows::RowLaunch(EmbeddingKernel<T>, s, stream, ids.as<T>(), table.as<T>(), s.rows,
                           table.dims[0], s.n, vocab_begin, out.as<T>());
  });
}

cudaError_t LaunchEmbeddingGrad(const DeviceTensor& ids, const DeviceTensor& dy,
                                int64_t vocab_begin, const DeviceTensor& dtable,
                                cudaStream_t stream) {
  return rows::ByType(dtable, [&](auto t) {
    return EmbeddingGrad<decltype(t)>(ids, dy, vocab_begin, dtable, stream);
  });
}

}  // namespace loom::exec::cuda
