#ifndef LOOM_TRANSFORM_STRATEGY_H_
#define LOOM_TRANSFORM_STRATEGY_H_

#include <string>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace loom::transform {

// A Megatron-style parallel configuration on a dp x pp x cp x tp device mesh.
struct Strategy {
  int dp = 1;            // data-parallel replicas
  int tp = 1;            // tensor-parallel degree (within a pipeline stage)
  int pp = 1;            // pipeline stages
  int vpp = 1;           // virtual stages (model chunks) per pipeline stage
  int ep = 1;            // expert-parallel degree, within the dp replicas (divides dp)
  int cp = 1;            // context-parallel degree
  // Under cp > 1: the sequence in 2 * cp chunks, rank r holding chunks r and
  // 2 * cp - 1 - r (Megatron-LM's load balancing for causal attention); false: in
  // cp contiguous chunks.
  bool cp_balanced = true;
  bool sp = false;       // sequence parallelism over the tp group
  int zero = 0;          // ZeRO stage 0..3 over the dp group
  int microbatches = 1;  // must match the spec's micro-batch count
  bool recompute = false;  // recompute every layer's forward before its backward
  bool factored = false;   // write one scale unit + replication rules

  std::string ToString() const;  // "dp2 tp2 pp2 cp2 sp zero1 mb8" ("cp2 contiguous")
};

// Rejects impossible combinations for `spec` with one clear message each:
// non-positive sizes, tp not dividing attention heads / kv heads / hidden sizes,
// cp not dividing the sequence (2 * cp when balanced), cp with expert parallelism,
// pp * vpp larger than the layer count, sp without tp, zero outside 0..3, ep not
// dividing dp or the expert count (or without experts), a
// micro-batch count different from the spec's, a batch not divisible by dp.
absl::Status ValidateStrategy(const ir::Graph& spec, const Strategy& strategy);

}  // namespace loom::transform

#endif  // LOOM_TRANSFORM_STRATEGY_H_
