#ifndef LOOM_VERIFY_SCHEDULE_SAFETY_H_
#define LOOM_VERIFY_SCHEDULE_SAFETY_H_

// Safety of a scheduled plan: whether the per-device programs in `Plan::order`
// list every step where it belongs, respect the data flow on each device, issue
// collectives consistently, run to completion without deadlock, and fit in memory.
//
// The checks, on an explicit plan with an order:
//  1. Membership. Every task appears exactly once in its own device's program and
//     in no other; every collective exactly once in each member's program and in no
//     other (kMissingStep, kDuplicateStep, kWrongDevice). A send_recv listed by its
//     source but not by its destination is a kUnmatchedSend (reported in place of
//     the destination's kMissingStep). Programs for devices outside the mesh are
//     kWrongDevice; a mesh device without a program is a kMissingStep.
//  2. Local data flow. On each device, a step comes after the steps on that device
//     producing its inputs there (kDependency, naming both steps). A task reads all
//     its inputs on its device; a collective's rank r reads inputs[r] when there is
//     one input per rank, else rank 0 reads every input (broadcast, send_recv).
//  3. Collective order. For each pair of devices, the collectives both take part in
//     appear in the same relative order in both programs (kCollectiveOrder, one per
//     pair, naming the two devices and two collectives).
//  4. Completion. A simulated run: a device advances through its program; a task
//     runs once its inputs are produced; a device reaches a collective once its
//     rank's inputs are produced, and the collective completes (producing all its
//     outputs) once every member has reached it. If the run cannot finish, each
//     cycle of the wait-for graph is one kDeadlock ("device 0 waits at all_reduce
//     #3 for device 1; device 1 waits at all_gather #4 for device 0"), starting at
//     its smallest device. A device waiting on itself (a step before its local
//     producer) or a chain ending at a device that has finished its program are
//     the consequence of issues 1 and 2 and are not reported again.
//  5. Memory. Per device, walking its program: a value (PlanValue::device) is live
//     from the step producing it (values without producer from the start) until
//     the last step of that device's program reading it; the plan's outputs stay
//     live to the end. Its size is its box's element count times its dtype's
//     bytes. The peak over the program is SafetyReport::peak_bytes; a peak above
//     SafetyOptions::memory_capacity_bytes is a kMemory. Gradient accumulation is
//     counted as a training framework runs it (Megatron-LM's main-grad buffer):
//     an accumulate task outside the micro-batches that sums micro-batch copies
//     holds its result from the first copy's production on, and each copy is
//     folded into it as it is produced, so the sum's reading of a copy does not
//     keep the copy alive.
//
// A factored plan's order is checked on its scale unit over every micro-batch
// copy, without expanding the plan (verify/factored_schedule_safety_internal.h; a pair of
// devices issuing shared collectives in different orders is reported as the
// deadlock it causes): every data-parallel replica runs its unit device's
// program, so replica r's run is replica 0's with devices and items shifted. A
// collective spanning the replicas is reached by all of its members at the same
// point of their (identical) programs, so it completes in the whole run exactly
// when its unit members reach it; a collective not spanning them stays within one
// replica. Hence the whole run finishes exactly when the unit's does, two devices
// of different replicas share only spanning collectives, whose relative order is
// that of their unit devices (checked within the unit), local data flow and
// membership are the unit's, and every replica's peak is its unit device's
// (values of a replica have the unit's sizes). Issues name unit devices and the
// factored plan's items with their micro-batch copy.
//
// Issues come in kind order (the enum's), each kind in device and step order. At
// most kMaxIssuesPerDevice issues of one kind are detailed per first device; the
// rest are counted in one summary issue of that kind.
//
// Plans that are malformed beyond what these checks describe (a value, device or
// step id out of range, a value written by two steps, a collective whose input
// count fits neither convention) give an InvalidArgument naming the item.
//
// Time: linear in the plan's size and its programs' lengths, plus, for the
// collective order, the sum over collectives of the squared group size.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/plan.h"
#include "verify/findings.h"

namespace loom::verify {

struct SafetyIssue {
  enum class Kind {
    kMissingStep,
    kDuplicateStep,
    kWrongDevice,
    kDependency,
    kCollectiveOrder,
    kUnmatchedSend,
    kDeadlock,
    kMemory,
  };
  Kind kind = Kind::kMissingStep;
  std::vector<int64_t> devices;  // devices involved
  // One line naming the devices, the tasks and collectives (id, op or collective
  // kind, micro-batch) and the values involved.
  std::string message;
};

// "missing_step", "duplicate_step", "wrong_device", "dependency",
// "collective_order", "unmatched_send", "deadlock", "memory".
absl::string_view SafetyIssueKindName(SafetyIssue::Kind kind);

// The failure class an issue of this kind is reported as: kDeadlock, kMemory, and
// kScheduleOrder for every other kind.
FailureClass SafetyFailureClass(SafetyIssue::Kind kind);

struct SafetyOptions {
  std::optional<int64_t> memory_capacity_bytes;  // per device; unset: not checked
};

// Live bytes by what they hold. Weights: parameters; gradients: gradients outside
// the micro-batches (the accumulated, reduced and clipped ones); optimizer states
// (master weights and moments included); communication: values a collective
// wrote that are none of those; activations: the rest (a micro-batch's
// activations, their gradients and its weight-gradient pieces, inputs, loss).
struct MemoryByRole {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t activations = 0;
  int64_t communication = 0;
};

struct SafetyReport {
  bool checked = false;  // false when the plan has no order (nothing to check)
  std::vector<SafetyIssue> issues;
  // Per mesh device: the peak of live value bytes over its program (empty when
  // not checked).
  std::vector<int64_t> peak_bytes;
  // Per mesh device: the live bytes by role at that peak (empty without a spec).
  std::vector<MemoryByRole> peak_by_role;
  // A factored plan: the programs checked are the scale unit's, run by this many
  // data-parallel replicas (1 for an explicit plan).
  int64_t replicas = 1;
};

// Detailed issues per kind and first device before the rest are summarised.
inline constexpr int kMaxIssuesPerDevice = 20;

// Checks the order of an explicit plan. A factored plan, or one whose order is
// empty (or has only empty programs), is not scheduled: checked = false and no
// issues. A negative capacity is an InvalidArgument.
absl::StatusOr<SafetyReport> CheckScheduleSafety(const ir::Plan& plan,
                                                 const SafetyOptions& options = {});

// The same for a plan of `spec`, explicit or factored (a factored plan's order is
// checked on its scale unit, as above), with the peak memory by role.
absl::StatusOr<SafetyReport> CheckScheduleSafety(const ir::Graph& spec, const ir::Plan& plan,
                                                 const SafetyOptions& options = {});

}  // namespace loom::verify

#endif  // LOOM_VERIFY_SCHEDULE_SAFETY_H_
