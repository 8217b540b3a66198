#ifndef LOOM_VERIFY_FOLD_H_
#define LOOM_VERIFY_FOLD_H_

// Folding alike layers of a factored plan before it is sliced.
//
// A factored plan's unit holds every layer once; its slice (verify/factored.h)
// repeats each for three replicas and adds the micro-batch and replica copies that
// gradient accumulation and data-parallel collectives read, so deriving the slice
// costs layers x (replicas + micro-batches + data-parallel members). Folding cuts
// the unit into layer stages (verify/stages.h, with opaque shares) and finds the
// classes of alike ones there, encoded with the unit's replication rules. Every
// stage of a class but the first (its representative) is left out of the slice:
// its items are never sliced nor derived. The representative is derived on its
// own in the slice; a left-out stage's values that the slice reads get the
// representative's contents, renamed (ops, and the tensors of opaque shares).
//
// Why that is the left-out stage's own derivation: the slice of a unit item is a
// function of the fields the unit encoding compares (kinds, attributes and their
// replica steps, micro-batch tags, groups that span replicas, value claims, their
// replica rules, whether they are outputs or opaque shares), and alike stages
// read their boundary inputs as claims; so the slice of a left-out stage, derived
// on its own, is the representative's slice derived on its own, renamed.
//
// Outputs. A left-out stage's plan outputs are not listed in the slice: the
// coverage of each spec output they hold is the coverage of the representative's
// corresponding output, renamed. Folding a class requires that every plan output
// holding such a tensor belongs to the stage (and likewise in the
// representative), and that both tensors are, or are not, spec outputs.

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/stages.h"

namespace loom::verify {

struct LayerFold {
  StagePartition unit;  // the unit's cut stages, classes and opaque share groups
  // A stage left out, and the stage standing for it (indices into unit.stages).
  struct Member {
    int stage = -1;
    int rep = -1;
  };
  std::vector<Member> members;
  // Unit stages (indices into unit.stages) that stand for at least one member.
  std::vector<int> reps;
  std::vector<char> skip_tasks, skip_collectives, skip_outputs;
  // Per unit value: the member whose items compute it (-1 for none), and its
  // position in that member's Stage::values.
  std::vector<int> value_member;
  std::vector<int> value_position;
  // Spec outputs held by left-out stages, and the representative's tensor whose
  // coverage stands for theirs.
  absl::flat_hash_map<ir::TensorId, ir::TensorId> covered_by;
  int64_t folded_items = 0;
};

// Folds a factored plan's unit. It needs of the plan only that IdsInRange holds,
// so it may run while ValidatePlan checks the rest; the fold is used only once
// that accepts the plan.
LayerFold FoldLayers(const ir::Graph& spec, const ir::Plan& unit, const ir::MicrobatchMap& mbmap);

// The same, started before the spec's micro-batch map is built, and on a plan
// not yet checked at all: no fold where an id the plan names is out of range
// (StagePartition::ids_out_of_range), else it cuts the stages, then calls
// `await_mbmap` for the map (null: no fold); `help`, where given, may take part
// in the stage encoding (verify/stages.h; the caller closes it).
std::optional<LayerFold> FoldLayers(const ir::Graph& spec, const ir::Plan& unit,
                                    std::function<const ir::MicrobatchMap*()> await_mbmap,
                                    EncodeHelp* help = nullptr);

// Whether every value id the plan's tasks, collectives and outputs name and every
// op id its tasks name are in range.
bool IdsInRange(const ir::Graph& spec, const ir::Plan& plan);

}  // namespace loom::verify

#endif  // LOOM_VERIFY_FOLD_H_
