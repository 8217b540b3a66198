#ifndef LOOM_EXEC_PLAN_INTERPRETER_H_
#define LOOM_EXEC_PLAN_INTERPRETER_H_

// The sequential plan interpreter: runs every task and collective of a distributed
// plan on the host, one at a time, with the reference kernels, and compares what
// each value holds with what its lineage claim says it holds. It is Loom's
// numerical check of a plan, independent of the verifier: it trusts neither the
// claims nor the plan's structure, and reports every inconsistency as an error.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/plan.h"

namespace loom::exec {

// Runs an explicit plan (call ir::ExpandPlan first for a factored one) in fp64 and
// returns the value of every plan value, indexed by ValueId.
//
// Values without producer are the plan's inputs (parameter, optimizer-state and
// data shards). They are initialised from `spec_feeds`, which holds a value for
// every input tensor of `spec`: the box slice of the logical tensor when the part
// is full, zeros when the part is empty; any other part is an error.
//
// Tasks run their op kind's reference kernel with the task's attributes; output
// shapes are inferred from the input values and must equal the extents of each
// output's box. Collectives compute what ir/collective_semantics.h defines, with
// inputs[i] / outputs[i] on devices[i].
//
// Without `plan.order`, steps run in dataflow order. With it, each device follows
// its own order, devices interleaved by data dependencies, and a collective runs
// once every member has reached it; when no device can move, the deadlock is
// reported naming each blocked device and the step it waits at. Every
// inconsistency (ids, devices, shapes, a value produced twice, a step never
// ready) is an InvalidArgument error naming the value, task or collective.
absl::StatusOr<std::vector<ir::HostTensor>> RunPlan(
    const ir::Graph& spec, const ir::Plan& plan,
    const absl::flat_hash_map<ir::TensorId, ir::HostTensor>& spec_feeds);

// How far a plan's values are from the logical reference. The relative error of a
// value is max |plan - reference| over its box divided by its scale: the largest
// |reference| over the box, but at least 1e-6 times the largest |reference| of any
// tensor of the same role class (loss, gradient, parameter and optimizer state,
// other), and at least 1e-30. The floor keeps rounding noise out of the report:
// a tensor that is zero in exact arithmetic (the gradient of a key bias) holds
// only noise, which a different summation order changes completely; an error of
// 1e-9 of the floor is still far below any real mistake. Values are grouped by
// the role of their logical tensor.
struct NumericReport {
  double max_rel_error_loss = 0.0;        // role loss
  double max_rel_error_gradients = 0.0;   // role gradient
  double max_rel_error_parameters = 0.0;  // role parameter or optimizer state
  double max_rel_error_all = 0.0;         // every checked value
  int64_t values_checked = 0;   // values with a full or an empty part
  int64_t values_partial = 0;   // values holding a partial sum: not checked
  // The value with the largest error: "value 12 (device 1, 'logits' [0:2,0:7] full):
  // rel error 0.31"; empty when nothing was checked.
  std::string worst;
};

// Expands `plan` if factored, draws random feeds for `spec` from `seed` (integer
// inputs below the smallest vocabulary found in `spec`: embedding table rows and
// cross_entropy classes), evaluates `spec` with ir::Evaluate and the plan with
// RunPlan, and compares every value whose part is full with the box slice of its
// logical tensor. A value whose part is empty must hold zeros; its error is
// measured against the same scale (the reference's magnitude over its box).
// Partial values are counted but not checked.
absl::StatusOr<NumericReport> CheckPlanNumerics(const ir::Graph& spec, const ir::Plan& plan,
                                                uint64_t seed);

}  // namespace loom::exec

#endif  // LOOM_EXEC_PLAN_INTERPRETER_H_
