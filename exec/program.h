#ifndef LOOM_EXEC_PROGRAM_H_
#define LOOM_EXEC_PROGRAM_H_

// A plan lowered to one instruction stream per device: what a backend executes.
//
// Instructions run a task's kernel, take part in a collective (send/recv being
// the two-member one), or free a buffer after its last use on the device. The
// order is the plan's `order` when it has one (the scheduler's), otherwise one
// global data-flow order (tasks and collectives by id among those ready)
// projected on every device, so that every member of a group meets its
// collectives in the same relative order. Buffers live from the instruction
// that produces them (the step's start for plan inputs) to their last reader;
// plan outputs live to the end. The same lifetimes give each device's peak
// memory, which backends measure again while they run.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::exec {

enum class InstrKind { kTask, kCollective, kFree };

struct Instr {
  InstrKind kind = InstrKind::kTask;
  int32_t id = -1;  // task, collective or value id
};

struct DeviceProgram {
  int64_t device = 0;
  std::vector<Instr> instrs;
  // Bytes of the buffers alive at the start (plan inputs on this device), and the
  // largest sum of live buffer bytes over the stream, at `bytes_per_element`.
  int64_t input_bytes = 0;
  int64_t peak_bytes = 0;
  // The same for the values of activations (role activation) alone: what a
  // pipeline schedule's memory model counts, held from a forward to its backward.
  int64_t peak_activation_bytes = 0;
};

struct Program {
  // The explicit plan it was lowered from (owned: a factored plan is expanded).
  ir::Plan plan;
  std::vector<DeviceProgram> devices;  // indexed by device id
  std::vector<ir::ValueId> inputs;     // values without producer, ascending
  // Per value: 1 when the step's caller receives it (plan outputs and the values
  // kept with LowerOptions::keep).
  std::vector<char> kept;
  // Per value: 1 when it holds (part of) an activation of the spec.
  std::vector<char> activation;
  int64_t bytes_per_element = 4;
};

struct LowerOptions {
  // Element size used for the memory figures (4 for fp32, 8 for fp64).
  int64_t bytes_per_element = 4;
  // Values kept past their last use and returned after the step, besides the
  // plan outputs (a check reads them).
  std::vector<ir::ValueId> keep;
};

// Lowers `plan` (expanded first when factored). Errors: ids out of range, a value
// produced twice or read before anything produces it in its device's stream, an
// order that misses or repeats an item, a cycle in the data flow; each names the
// item.
absl::StatusOr<Program> LowerPlan(const ir::Graph& spec, const ir::Plan& plan,
                                  const LowerOptions& options = {});

// Checks, before anything runs, that the device streams can finish: every
// member of a group issues the group's collectives in the same order (NCCL's
// matching rule; send/recv per direction), and a simulated run where each
// device follows its stream and a collective waits for all its members never
// blocks. Backends whose collectives would hang on a mismatch (NCCL) run it
// first. The error names the devices and collectives, as the CPU backend's
// do at run time.
absl::Status CheckCollectiveOrder(const Program& program);

// "task 12 (device 0, linear)" / "collective 3 (all_reduce over devices 0,1)".
std::string DescribeInstr(const Program& program, const Instr& instr);

}  // namespace loom::exec

#endif  // LOOM_EXEC_PROGRAM_H_
