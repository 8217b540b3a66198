#ifndef LOOM_EXEC_CUDA_DEVICE_TENSOR_H_
#define LOOM_EXEC_CUDA_DEVICE_TENSOR_H_

// A dense row-major tensor in GPU memory, as the CUDA backend's kernels see it.
// Kept free of Abseil and of the IR so that nvcc only sees CUDA headers.
//
// Every element has the run's element type: float (fp32 runs) or double (fp64
// runs). Integer tensors (token ids, targets, expert indices) are stored in the
// same type holding exact integers, as the reference kernels hold them.

#include <cstdint>

namespace loom::exec::cuda {

inline constexpr int kMaxRank = 8;

struct DeviceTensor {
  void* data = nullptr;  // float* or double*
  bool f64 = false;      // element type: double when true, float otherwise
  int rank = 0;
  int64_t dims[kMaxRank] = {};

  int64_t size() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  int64_t dim(int i) const { return dims[i]; }
  // Elements of dims [from, to).
  int64_t Product(int from, int to) const {
    int64_t n = 1;
    for (int i = from; i < to; ++i) n *= dims[i];
    return n;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

}  // namespace loom::exec::cuda

#endif  // LOOM_EXEC_CUDA_DEVICE_TENSOR_H_
