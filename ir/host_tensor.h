#ifndef LOOM_IR_HOST_TENSOR_H_
#define LOOM_IR_HOST_TENSOR_H_

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/shape.h"

namespace loom::ir {

// A dense row-major tensor in host memory, used by the reference kernels.
// Values are held as doubles whatever the dtype: integer tensors (token ids,
// expert indices) hold exact integers, and fp32 evaluation rounds every stored
// value to float (see ir/interpreter.h).
struct HostTensor {
  Shape shape;
  DType dtype = DType::kF64;
  std::vector<double> data;

  HostTensor() = default;
  HostTensor(Shape s, DType t)
      : shape(std::move(s)), dtype(t), data(static_cast<size_t>(shape.num_elements()), 0.0) {}

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  double& operator[](int64_t i) { return data[i]; }
  double operator[](int64_t i) const { return data[i]; }
};

}  // namespace loom::ir

#endif  // LOOM_IR_HOST_TENSOR_H_
