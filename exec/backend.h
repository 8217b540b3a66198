#ifndef LOOM_EXEC_BACKEND_H_
#define LOOM_EXEC_BACKEND_H_

// Backends execute a lowered plan (exec/program.h), one step at a time.
//
// The CPU backend runs one thread per device. Collectives and send/recv block
// like NCCL's: every member must issue them, and a group's members must issue
// its collectives in the same order (a send/recv pair matches the sender's and
// the receiver's transfers between the two, in order). A member that issues a
// different collective at the same position of a group's sequence stops the
// step at once with an error naming both devices and both collectives; devices
// that all wait on one another (or a wait longer than the timeout) stop it with
// an error naming every waiting device, its collective and the members it waits
// for. Nothing hangs.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "exec/cpu_kernels.h"
#include "exec/program.h"
#include "ir/host_tensor.h"

namespace loom::exec {

struct ExecOptions {
  // kF32 or kF64: the element type of every float buffer and product.
  ir::DType precision = ir::DType::kF32;
  // Longest wait at a collective before the step is stopped.
  double collective_timeout_s = 60;
};

struct DeviceStats {
  double busy_seconds = 0;     // running kernels and collectives, waits excluded
  double wait_seconds = 0;     // waiting for the members of collectives
  MatmulStats matmul;          // the matrix products among the kernels
  int64_t peak_bytes = 0;      // largest sum of live buffer bytes, measured
  int64_t peak_activation_bytes = 0;  // the same for activations (Program::activation)
  int64_t host_ops = 0;        // CUDA: tasks run by their reference kernel on the host
  double upload_seconds = 0;   // CUDA: copying the step's plan inputs to the GPU
};

// What a device holds while it runs its program: the bytes of its live values
// and of the activations among them (Program::activation), with their peaks
// kept in DeviceStats. Both backends measure through it, so their figures are
// comparable with each other and with the lowering's prediction.
class MemoryMeter {
 public:
  MemoryMeter(const Program& program, int64_t bytes_per_element, DeviceStats& stats)
      : program_(program), bytes_per_element_(bytes_per_element), stats_(stats) {}
  // Value v (of `elements` elements) is now held, or no longer.
  void Hold(ir::ValueId v, int64_t elements);
  void Release(ir::ValueId v, int64_t elements);

 private:
  const Program& program_;
  const int64_t bytes_per_element_;
  DeviceStats& stats_;
  int64_t live_ = 0;
  int64_t live_activations_ = 0;
};

struct StepResult {
  // By value id: the values the program keeps (plan outputs and Program::kept).
  std::vector<std::optional<ir::HostTensor>> values;
  double seconds = 0;  // wall time of the step
  std::vector<DeviceStats> devices;
};

// Values of one step's plan inputs, by value id (entries for other ids empty).
using ValueStore = std::vector<std::optional<ir::HostTensor>>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Runs one step of `program` from `inputs` (one entry per Program::inputs).
  virtual absl::StatusOr<StepResult> RunStep(const Program& program, ValueStore inputs) = 0;
};

// "cpu", or "cuda" (an Unavailable error where this build or machine has no GPU).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(absl::string_view name,
                                                     const ExecOptions& options);

std::unique_ptr<Backend> MakeCpuBackend(const ExecOptions& options);

// Unavailable without a GPU or in a build without the CUDA backend.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const ExecOptions& options);

// Runs one task on GPU 0 through the CUDA backend (its kernel, or the reference
// kernel on the host where it has none; `on_gpu` tells which). For tests.
absl::StatusOr<std::vector<ir::HostTensor>> RunTaskOnCuda(
    const ir::Task& task, absl::Span<const ir::HostTensor* const> in, ir::DType precision,
    bool* on_gpu);

}  // namespace loom::exec

#endif  // LOOM_EXEC_BACKEND_H_
