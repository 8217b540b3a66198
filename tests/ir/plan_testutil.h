#ifndef LOOM_TESTS_IR_PLAN_TESTUTIL_H_
#define LOOM_TESTS_IR_PLAN_TESTUTIL_H_

// A small training step and two hand-written plans over it, shared by the plan
// and plan JSON tests.

#include <string>

#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::ir::testing {

inline constexpr int64_t kPlanBatch = 4;   // sequences per micro-batch
inline constexpr int64_t kPlanSeq = 3;
inline constexpr int64_t kPlanVocab = 5;
inline constexpr int64_t kPlanHidden = 4;

// embedding -> linear -> cross_entropy, built into a training step (AdamW) with
// `microbatches` micro-batches.
Graph PlanTestStep(int microbatches);

// Looks a tensor up by name; aborts the test binary when it is missing.
TensorId TensorNamed(const Graph& g, const std::string& name);
// The op producing tensor `name`.
OpId ProducerOf(const Graph& g, const std::string& name);

// A factored plan over PlanTestStep(2) on mesh dp=2 x tp=2 (stride 2): on unit
// devices 0 and 1, the embedding of micro-batch 0 on device 0, a send of its output
// to device 1, the micro-batch accumulation of the embedding gradient and its
// all-reduce across the data-parallel replicas.
Plan FactoredTestPlan(const Graph& spec);
// What FactoredTestPlan expands to, written out by hand.
Plan ExplicitTestPlan(const Graph& spec);

}  // namespace loom::ir::testing

#endif  // LOOM_TESTS_IR_PLAN_TESTUTIL_H_
