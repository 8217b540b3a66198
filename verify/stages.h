#ifndef LOOM_VERIFY_STAGES_H_
#define LOOM_VERIFY_STAGES_H_

// Stages of a lineage derivation, and the classes of stages that derive alike.
//
// A stage is the work of one layer: every task and collective the plan tags with
// that layer (forward, backward, recomputation and optimizer, in every replica
// and micro-batch the derivation walks) and the phantoms copied from its values.
// A collective or a phantom belongs to the layer whose items compute everything
// it reads, so that the collective completing a layer's partial sums goes with
// it; a transfer between pipeline stages (send_recv) belongs to no layer, so that
// the layers on either side of a pipeline cut are alike to the ones inside. A
// stage is cut from the rest of the plan at its boundary values: inputs it
// reads from outside, outputs read outside it or listed as plan outputs. It is
// cut only where every boundary input claims a complete value or zeros, or is an
// opaque share (below): there a
// value's derived contents are its claim whenever the derivation accepts it
// (verify/derive.h falls back to the claim after a failure), so the stage can be
// derived on its own from its inputs as claimed. Its boundary outputs may hold
// anything (a layer's partial sums of squares for the gradient norm); their
// derived contents are what the rest of the plan reads.
//
// Two stages are alike when their items, in walk order, are the same up to one
// renaming of plan values, logical ops, logical tensors and devices: same kinds,
// attributes, claims (boxes, value parts, micro-batches), operand patterns, op
// kinds, attributes and tensor types, and the same place in the checks after the
// walk (plan outputs, replica copies). The derivation reads nothing else of an
// item, so with boundary inputs as claimed one stage derives what the other
// does, renamed: the same failures and open questions, the same partition laws,
// and boundary outputs whose contents are the other's with its ops renamed.
// Where the plan is a micro-batch slice (verify/factored.h), an op or tensor of
// micro-batch m >= 1 is named as the copy m of its micro-batch-0 original, which
// keeps the renaming consistent with the copies the phantoms read.
//
// Alike-ness is decided on the full item lists (a hash only buckets them), never
// on a hash alone.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/factored.h"
#include "verify/stage.h"

namespace loom::verify {

// Opaque shares. A value that one stage (or the work outside every stage)
// produces and another stage (or the work outside every stage) reads, claiming a
// share of a sum (the residual stream that tensor-parallel layers carry as
// per-rank partial sums, also where it crosses a pipeline cut), cuts the reading
// stage only if it is read as what its claim says: an opaque share
// (verify/contrib.h, Contrib::kShare), of which all that is known is that the
// shares of its group add up to the complete value. A group is every such value
// with one tensor, box, micro-batch, data-parallel rule and producing stage (or
// the work outside every stage); it qualifies when its parts are equal or
// disjoint and the distinct parts make up the whole. Where the group is
// produced, the derivation checks that what its members hold adds up to the
// complete value (verify/derive.h); readers see only the shares.
// Another thread's help with encoding the stages (PartitionStages). The stage
// cutting offers the encoding once it starts; a thread with nothing more urgent
// to do calls Help, which waits for the offer, encodes stages from the back of
// the list until none is left and returns; or returns at once when the offer is
// over or will never come (Close, which the offering side must call however it
// ends).
class EncodeHelp {
 public:
  void Help();
  void Close();

  // For PartitionStages: offers `job` (run at most once, by the helping thread);
  // Withdraw ends the offer and waits for a job that started to finish.
  void Offer(std::function<void()> job);
  void Withdraw();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;
  bool closed_ = false;
  bool over_ = false;  // an offer was made and withdrawn
  bool running_ = false;
};

struct StageOptions {
  // The plan is this slice's (verify/factored.h).
  const SlicedPlan* sliced = nullptr;
  // Micro-batch copies of ops and tensors (the slice's when null and sliced).
  const ir::MicrobatchMap* mbmap = nullptr;
  // Find the opaque share groups of the plan (a factored plan's unit, or an
  // explicit plan).
  bool find_shares = false;
  // Or take them as given: the group of each value, -1 for none.
  const std::vector<int>* share_group = nullptr;
  // Where the micro-batch map is still being built: called, once the stages are
  // cut, for the map their encoding needs (instead of `mbmap`). Null from it
  // leaves the classes empty and sets StagePartition::no_map.
  std::function<const ir::MicrobatchMap*()> await_mbmap;
  // Fill StagePartition::value_stage.
  bool value_stages = false;
  // A thread that helps encode the stages (not closed here).
  EncodeHelp* help = nullptr;
};

struct StagePartition {
  std::vector<Stage> stages;              // cut stages, by layer
  std::vector<std::vector<int>> classes;  // stages alike; the first stands for all
  int64_t layers = 0;                     // layers with items (cut or not)
  // With find_shares: the opaque share group of each value (-1 for none).
  std::vector<int> share_group;
  int num_share_groups = 0;
  // The stage index (Stage::index) of each item, -1 for none.
  std::vector<int> item_stage;
  // With value_stages: the cut stage (index into `stages`) computing each value;
  // -1 where no stage's item does, -2 where an uncut stage's does.
  std::vector<int> value_stage;
  // await_mbmap gave no map: the stages are cut, not classed.
  bool no_map = false;
  // An id the plan names (a value of an item or of the outputs, a task's op) is
  // out of range: nothing else is filled.
  bool ids_out_of_range = false;
};

// The cut stages of `plan` and their classes. A factored plan's unit is encoded
// with its replication rules (the data-parallel fields of values, tasks and
// collectives), so that alike stages of the unit have alike slices.
StagePartition PartitionStages(const ir::Graph& spec, const ir::Plan& plan,
                               const StageOptions& options);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_STAGES_H_
