#ifndef LOOM_IR_COLLECTIVE_SEMANTICS_H_
#define LOOM_IR_COLLECTIVE_SEMANTICS_H_

// What a collective computes, written once. The plan checks (output shapes), the
// verifier's derivation (what each output holds), the plan interpreter and the CPU
// backend (the numbers) and the CUDA backend (which NCCL reduction it asks for)
// all read a collective through this definition, so that none of them can give a
// kind or a reduce op a meaning the others do not.
//
// Member i's output is assembled from regions of the members' inputs by moves:
// each move copies the region `from` of input `source` to the region `to` of
// output `target`. For a reducing collective (all_reduce, reduce_scatter) every
// move into one output covers that whole output, and the moves combine element
// by element with the collective's reduce op (sum or max), in member order; an
// average (avg) combines by sum and then multiplies every output by `scale`, 1/n.
// Otherwise the moves into one output tile it, each element written once.
//
// With n members and inputs of dims D (all inputs alike):
//
//   kind            output dims              output i
//   all_reduce      D                        reduce over j of input j
//   reduce_scatter  D, `dim` divided by n    reduce over j of chunk i along `dim` of input j
//   all_gather      D, `dim` times n         chunk j along `dim` = input j
//   all_to_all      D, `dim` divided by n,   chunk j along `dim2` = chunk i along `dim` of input j
//                   `dim2` times n
//   broadcast       D                        input 0 (the root's, devices[0])
//   send_recv       D                        input 0 (one output, on devices[1])

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/plan.h"

namespace loom::ir {

struct CollectiveMove {
  int target = 0;  // output index
  Box to;          // region of that output, in the output's own coordinates
  int source = 0;  // input index
  Box from;        // region of that input, in the input's own coordinates
};

struct CollectiveMeaning {
  // Set for the reducing kinds: how the moves into one output combine (kSum or
  // kMax; an average combines by kSum).
  std::optional<ReduceOp> reduce;
  // What every output is multiplied by once combined: 1, or 1/n for an average.
  Rational scale = Rational::One();
  std::vector<int64_t> output_dims;  // every output's dims
  int outputs = 0;
  // Grouped by target in output order; within a target, in member order.
  std::vector<CollectiveMove> moves;
};

// Whether `kind` combines its members' inputs element by element (all_reduce,
// reduce_scatter); only these read a collective's reduce op.
bool CollectiveReduces(CollectiveKind kind);

// The meaning of a collective of `kind` over `members` ranks with the given reduce
// op and dims (0 .. rank - 1; -1, "none", is out of range), whose inputs all have dims
// `input_dims`. InvalidArgument (without a place: callers add theirs) when a dim
// is out of range, when `dim` does not split into `members` equal chunks, when an
// all_to_all's two dims are one, or when a non-reducing kind asks for a max.
absl::StatusOr<CollectiveMeaning> MeaningOf(CollectiveKind kind, ReduceOp reduce,
                                            int64_t members, int dim, int dim2,
                                            absl::Span<const int64_t> input_dims);

// The same for `c` over its own group (`members` overrides the group size, for
// a factored plan's collective that spans every replica).
absl::StatusOr<CollectiveMeaning> MeaningOf(const Collective& c,
                                            absl::Span<const int64_t> input_dims,
                                            int64_t members = -1);

// Combines `x` into `acc` with `op` (a meaning's combining op: kSum or kMax):
// acc + x or max(acc, x).
inline double Reduce(ReduceOp op, double acc, double x) {
  return op == ReduceOp::kMax ? (x > acc ? x : acc) : acc + x;
}

}  // namespace loom::ir

#endif  // LOOM_IR_COLLECTIVE_SEMANTICS_H_
