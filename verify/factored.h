#ifndef LOOM_VERIFY_FACTORED_H_
#define LOOM_VERIFY_FACTORED_H_

// Deriving a factored plan without expanding it.
//
// A factored plan is one scale unit (micro-batch 0 of data-parallel replica 0)
// plus replication rules; its explicit form repeats the unit M times per replica
// and dp times over, which at production sizes is tens of millions of values.
// The derivation instead walks a slice of it:
//
//  - Micro-batches. When the spec's micro-batches are copies of one another
//    (CheckMicrobatchSymmetry: op k of micro-batch m reads the micro-batch-m
//    images of what op k of micro-batch 0 reads, with equal kinds, attributes and
//    types), copy m of a micro-batch-0 item computes the image of what copy 0
//    computes: the same derivation with op and tensor ids renamed. So only copy 0
//    is derived; where an item outside the micro-batches (gradient accumulation)
//    reads copy m, the copy is a *phantom* whose contents are copy 0's renamed.
//  - Replicas. Every integer of replica r (box bounds, attribute values, value
//    shares) is affine in r, and the derivation's decisions compare such integers
//    (equalities, and order for bounds and disjointness). Replicas 0, 1 and dp - 1
//    are derived; an equality that holds at r = 0 and r = 1 holds for every r, an
//    order that holds at r = 0 and r = dp - 1 holds in between, and every value of
//    replica dp - 1 must hold what replicas 0 and 1 extrapolate to (checked; a
//    value that does not makes the verdict undecided). Where an item spanning the
//    replicas (a data-parallel all-reduce) or the coverage of the outputs needs
//    replica r's value, it is a phantom extrapolated from replicas 0 and 1.
//
// Either way every collective across replicas, every sum and the coverage of
// every output are still checked member by member.

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/plan.h"

namespace loom::verify {

// A value of the slice that no item of it computes: its contents follow from
// other values of the slice.
struct Phantom {
  ir::ValueId value = ir::kNoId;
  ir::ValueId src0 = ir::kNoId;  // copy 0 of it / its replica 0 copy
  ir::ValueId src1 = ir::kNoId;  // its replica 1 copy (replica phantoms)
  int microbatch = -1;           // >= 1: micro-batch copy of src0
  int64_t replica = -1;          // >= 2: extrapolated from src0 and src1
};

struct SlicedPlan {
  ir::Plan plan;  // explicit: the derived replicas' micro-batch-0 work
  std::vector<Phantom> phantoms;
  // Ids of each unit value in replicas 0, 1 and dp - 1 (when dp >= 3).
  struct ReplicaTriple {
    ir::ValueId r0 = ir::kNoId, r1 = ir::kNoId, last = ir::kNoId;
  };
  std::vector<ReplicaTriple> replica_checks;
  // Outputs whose claim is the same in every replica (neither shifted nor shared
  // per replica): only replicas 0 and 1 are listed in plan.outputs, and the two
  // must hold the same (then, by extrapolation, so does every replica).
  std::vector<std::pair<ir::ValueId, ir::ValueId>> same_in_every_replica;
  int64_t dp = 1;
  int microbatches = 1;
  ir::MicrobatchMap mbmap;
  // The derived replicas, and the slice's value for the micro-batch-0 copy of
  // each unit value in each of them ([slot][unit value], kNoId where the slice
  // has none).
  std::vector<int64_t> replicas;
  std::vector<std::vector<ir::ValueId>> real;
  // Where each slice value comes from: unit value, replica, micro-batch.
  struct Origin {
    ir::ValueId unit = ir::kNoId;
    int64_t replica = 0;
    int microbatch = 0;
  };
  std::vector<Origin> origin;
  // Per slice collective: 0, or the replica count of a data-parallel sum whose
  // members are listed for the derived replicas only (SliceOptions::
  // compress_replicas): member (unit member i, derived replica s) at
  // i * replicas.size() + s; the others are replica phantoms, summed in closed
  // form (ContribStore::ProgressionSum).
  std::vector<int64_t> elided;
};

// Unit items a slice leaves out: their work stands for itself elsewhere (a layer
// alike another, verify/fold.h). Their values that the slice's items read become
// values no item of the slice computes; outputs they list are not listed.
struct SliceOptions {
  const std::vector<char>* skip_tasks = nullptr;        // per unit task
  const std::vector<char>* skip_collectives = nullptr;  // per unit collective
  const std::vector<char>* skip_outputs = nullptr;      // per unit value
  // Data-parallel sums (all-reduce spanning the replicas) list the derived
  // replicas' members only (SlicedPlan::elided).
  bool compress_replicas = false;
};

// OK when the spec's micro-batches are copies of micro-batch 0 (see above); `map`
// is MicrobatchMap::Build(spec), which has compared the copies' kinds, attributes
// and operand counts already.
absl::Status CheckMicrobatchSymmetry(const ir::Graph& spec, const ir::MicrobatchMap& map);

// The same check as work that threads can share: the micro-batch-0 part when
// constructed, then each copy m >= 1 on its own (in any order, on any thread).
class MicrobatchSymmetry {
 public:
  MicrobatchSymmetry(const ir::Graph& spec, const ir::MicrobatchMap& map);
  // What micro-batch 0 alone decides (an op reading another micro-batch).
  const absl::Status& status() const { return status_; }
  // Whether copy m reads the micro-batch-m images of copy 0's inputs, with the
  // types of copy 0's data inputs.
  absl::Status CheckCopy(int m) const;
  int microbatches() const { return map_.microbatches(); }

 private:
  const ir::Graph& spec_;
  const ir::MicrobatchMap& map_;
  absl::Status status_;
  std::vector<ir::OpId> ops0_;          // micro-batch 0's ops
  std::vector<int64_t> input_begin_;    // per op of ops0_, into data_input_
  std::vector<char> data_input_;        // per input: a data input of micro-batch 0
};

// The slice of a factored plan that ValidatePlan accepted; nullopt when the
// spec's micro-batches are not copies of one another (expand the plan instead).
absl::StatusOr<std::optional<SlicedPlan>> SliceFactoredPlan(const ir::Graph& spec,
                                                            const ir::Plan& plan,
                                                            const SliceOptions& options = {});
// The slice of a factored plan whose replication rules and micro-batch symmetry
// were checked with `mbmap` (ValidateFactoring, CheckMicrobatchSymmetry).
SlicedPlan SliceFactoredPlan(const ir::Graph& spec, const ir::Plan& plan,
                             ir::MicrobatchMap mbmap, const SliceOptions& options);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_FACTORED_H_
