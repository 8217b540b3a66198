#ifndef LOOM_TRANSFORM_PARALLELIZE_H_
#define LOOM_TRANSFORM_PARALLELIZE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "transform/partition.h"
#include "transform/strategy.h"

namespace loom::transform {

// The Megatron-style policy: partition decisions for `spec` under `strategy`.
//  - pipeline: layers cut into pp * vpp contiguous chunks balanced by forward FLOPs
//    (embedding on the first chunk, head and loss on the last); chunk v runs on
//    pipeline stage v % pp; backward pieces run where their forward ran;
//  - data parallel: the batch dim of every activation is split over dp, so weight
//    gradients come out as partial sums over dp;
//  - tensor parallel: linear layers split column-wise (output features) when their
//    input is whole and row-wise (input features, partial output) when it arrives
//    split; embeddings split by vocabulary; other ops follow the split of their inputs
//    (attention by heads, coupled with the kv heads);
//  - sequence parallel: ops between tensor-parallel regions split the sequence dim;
//  - context parallel: every activation's sequence dim split over cp in contiguous
//    chunks (Parallelize: in 2 * cp load-balanced ones, transform/balanced_chunks.h);
//    attention splits its queries (each chunk placed by q_offset, RoPE's
//    by offset) and reads its keys and values gathered over cp, whose gradients
//    come back reduce-scattered; weight gradients are partial sums over cp as
//    over dp;
//  - ZeRO 1/2/3: optimizer updates (and, from stage 2, gradient accumulation) split
//    over dp (stages 1 and 2: over dp x cp, Megatron-LM's dp_cp group) along a
//    parameter dim; stage 3 also keeps parameters sharded over dp;
//  - recompute: every layer's forward is re-run before its backward.
absl::StatusOr<PartitionSpec> MegatronPolicy(const ir::Graph& spec, const Strategy& strategy);

// ValidateStrategy, MegatronPolicy, Materialize. `zero_whole`, when given, gets
// the parameters ZeRO had to leave whole (PartitionSpec::zero_whole).
absl::StatusOr<ir::Plan> Parallelize(const ir::Graph& spec, const Strategy& strategy,
                                     std::vector<std::string>* zero_whole = nullptr);

}  // namespace loom::transform

#endif  // LOOM_TRANSFORM_PARALLELIZE_H_
