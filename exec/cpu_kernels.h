#ifndef LOOM_EXEC_CPU_KERNELS_H_
#define LOOM_EXEC_CPU_KERNELS_H_

// The CPU backend's kernels: matrix products (linear, linear_wgrad, matmul,
// attention and its gradient) through OpenBLAS in the run's precision, every
// other op through its reference
// kernel (ir/op_schema.h). In fp32 every stored float is rounded to float, as the
// single-device reference (ir::Evaluate) does.

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec {

// Time and work of the matrix products (linear, linear_wgrad, matmul) of one
// device.
struct MatmulStats {
  double seconds = 0;
  double flops = 0;  // a multiply-add counts 2
};

// Runs `task` on `in`; `out` receives one tensor per output, shaped as inferred
// from the inputs. Errors name the task.
absl::Status RunTaskKernel(const ir::Task& task, absl::Span<const ir::HostTensor* const> in,
                           ir::DType precision, std::vector<ir::HostTensor>& out,
                           MatmulStats* stats);

// Rounds every element of `t` to float when `precision` is fp32 and t is a float.
void RoundToPrecision(ir::HostTensor& t, ir::DType precision);

// Restricts OpenBLAS to one thread per calling device thread.
void UseSingleThreadedBlas();

// Peak single-precision GEMM rate of this machine through OpenBLAS on one thread,
// measured on square products of size `n` (FLOP/s).
double MeasureSgemmPeak(int n, int repeats);

}  // namespace loom::exec

#endif  // LOOM_EXEC_CPU_KERNELS_H_
