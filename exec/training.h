#ifndef LOOM_EXEC_TRAINING_H_
#define LOOM_EXEC_TRAINING_H_

// Training steps of a plan on a backend, and the comparison with the
// single-device reference.
//
// Step 1 starts from deterministic random parameters and optimizer states (the
// seed). Each step feeds every plan input its box of the logical tensor, runs the
// plan, reads the loss from the plan output holding it, and assembles every
// updated parameter and optimizer state from the plan outputs covering it; those
// become the next step's parameters and states. Integer data inputs (token ids,
// targets) are refilled each step from a token stream: synthetic (from the seed)
// or the int32 token ids of a binary file, read in order and wrapped, reduced
// below the model's smallest vocabulary; every data-parallel rank and
// micro-batch reads its own box of the step's batch, as the plan says.
//
// With `check`, the logical step (ir::Evaluate, same precision) runs beside it
// from the same start and data, and keeps its own parameters. After each step
// the difference of the loss, of every parameter gradient the optimizer applies
// (where the plan holds it complete), and of every updated parameter and state is measured relative to the magnitude of the
// reference tensor, floored at a fraction of the largest of its role class (1e-6
// in fp64, 1e-4 in fp32) so that a tensor that is zero in exact arithmetic is
// not measured against its own rounding noise.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "exec/backend.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec {

struct TrainOptions {
  int steps = 1;
  uint64_t seed = 1;
  bool check = false;
  std::string data_path;  // int32 token ids; empty: synthetic
  ir::DType precision = ir::DType::kF32;  // the backend's
  // Host memory the run may use; 0: what this machine has available (MemAvailable,
  // and the address-space limit when one is set). A run whose need, known once the
  // plan is lowered, exceeds it is refused before it allocates (ResourceExhausted).
  int64_t host_memory_bytes = 0;
};

// Host memory available to this process: MemAvailable of /proc/meminfo, at most the
// address-space limit (RLIMIT_AS); 0 when neither can be read.
int64_t AvailableHostMemory();

struct StepReport {
  double loss = 0;
  double seconds = 0;
  double reference_loss = 0;  // with check
};

// Largest relative differences from the reference over all steps.
struct CheckReport {
  double loss = 0;
  double gradients = 0;
  double parameters = 0;  // parameters and optimizer states after the update
  int64_t gradients_compared = 0;
  int64_t parameters_compared = 0;
  std::string worst;  // "step 2: 'w1.new' rel 3.1e-07"
  // The reference's gradient-clipping coefficient, smallest over the steps (none
  // when the step does not clip): at 1 clipping was inactive, and a plan that
  // computes the gradient norm wrongly would still match.
  std::optional<double> clip_coefficient;
};

struct TrainReport {
  std::vector<StepReport> steps;
  std::vector<DeviceStats> devices;         // of the last step
  std::vector<int64_t> predicted_peak_bytes;  // per device, from the lowering
  std::vector<int64_t> predicted_peak_activation_bytes;  // the same for activations
  std::optional<CheckReport> check;
  MatmulStats matmul;  // all devices and steps
};

absl::StatusOr<TrainReport> RunTraining(const ir::Graph& spec, const ir::Plan& plan,
                                        Backend& backend, const TrainOptions& options);

// One step of `plan` (explicit or factored) on `backend` from given values of the
// spec's inputs (by tensor id; every tensor a plan input claims must have one):
// each plan input gets its box of its logical tensor, and every output of the
// spec is put together from the plan outputs holding it (whole parts, tiling it).
// A spec output the plan's outputs do not cover is a FailedPrecondition error.
absl::StatusOr<absl::flat_hash_map<ir::TensorId, ir::HostTensor>> RunStepOnValues(
    const ir::Graph& spec, const ir::Plan& plan, Backend& backend,
    const absl::flat_hash_map<ir::TensorId, ir::HostTensor>& feeds);

}  // namespace loom::exec

#endif  // LOOM_EXEC_TRAINING_H_
