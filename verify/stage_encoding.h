#ifndef LOOM_VERIFY_STAGE_ENCODING_H_
#define LOOM_VERIFY_STAGE_ENCODING_H_

// The encoding of a layer stage (verify/stages.h): its items written out with
// every id renamed to its order of first appearance, so that alike stages read
// alike. Used by the stage partition only.

#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/plan.h"
#include "verify/factored.h"
#include "verify/scratch.h"
#include "verify/stage.h"

namespace loom::verify::stage_encoding {

// A stage's items written out with every id renamed to its order of first
// appearance. Attribute maps and shapes are compared as objects.
struct Signature {
  std::vector<int64_t> codes;
  std::vector<const ir::AttrMap*> attrs;
  std::vector<const ir::Shape*> shapes;
  std::vector<const std::string*> names;  // attribute names (replica steps)

  void Clear() {
    codes.clear();
    attrs.clear();
    shapes.clear();
    names.clear();
  }

  // Buckets only (alike-ness is decided by operator==): the sizes and the codes'
  // two ends.
  size_t Hash() const {
    constexpr size_t kEnds = 64;
    const size_t n = codes.size();
    const absl::Span<const int64_t> all(codes);
    return absl::HashOf(n, attrs.size(), shapes.size(), names.size(),
                        all.subspan(0, std::min(n, kEnds)),
                        all.subspan(n - std::min(n, kEnds)));
  }
  bool operator==(const Signature& o) const {
    if (codes != o.codes || attrs.size() != o.attrs.size() || shapes.size() != o.shapes.size() ||
        names.size() != o.names.size()) {
      return false;
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (*names[i] != *o.names[i]) return false;
    }
    for (size_t i = 0; i < attrs.size(); ++i) {
      if (!(*attrs[i] == *o.attrs[i])) return false;
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!(*shapes[i] == *o.shapes[i])) return false;
    }
    return true;
  }
};

// A rename table's entry: (stage + 1, code), zero for none.
struct Entry {
  int32_t stage;
  int32_t code;
};

// Codes of ids in order of first appearance, one numbering per stage: an entry
// counts only when its stamp is the stage's (no clearing between stages).
class RenameTable {
 public:
  RenameTable() = default;
  explicit RenameTable(Entry* entries) : entries_(entries) {}
  // The id's code in `stage`, or -1 when it has none yet.
  int64_t Find(int64_t id, int stage) const {
    const Entry& e = entries_[id];
    return e.stage == stage + 1 ? e.code : -1;
  }
  void Set(int64_t id, int stage, int64_t code) {
    entries_[id] = Entry{stage + 1, static_cast<int32_t>(code)};
  }

 private:
  Entry* entries_ = nullptr;
};

// The tables of values, logical ops and logical tensors, in scratch memory
// (verify/scratch.h): a table is touched all over, stage by stage.
class RenameTables {
 public:
  RenameTables(const ir::Graph& spec, const ir::Plan& plan)
      : RenameTables(plan.values.size(), static_cast<size_t>(spec.num_ops()),
                     static_cast<size_t>(spec.num_tensors())) {}
  RenameTable values, ops, tensors;

 private:
  RenameTables(size_t nv, size_t no, size_t nt)
      : scratch_((nv + no + nt + 1) * sizeof(Entry)),
        region_(static_cast<Entry*>(
            scratch_.AllocateZeroed((nv + no + nt + 1) * sizeof(Entry), alignof(Entry)))) {
    values = RenameTable(region_);
    ops = RenameTable(region_ + nv);
    tensors = RenameTable(region_ + nv + no);
  }
  Scratch scratch_;
  Entry* region_;
};

// Every item's input (or output) values, read once into one array: the passes
// below and the stage encoding read them several times.
struct FlatIds {
  explicit FlatIds(std::pmr::memory_resource* memory) : begin(memory), ids(memory) {}
  std::pmr::vector<int64_t> begin;  // item i's are ids[begin[i], begin[i + 1])
  std::pmr::vector<ir::ValueId> ids;
  absl::Span<const ir::ValueId> of(int64_t i) const {
    return absl::Span<const ir::ValueId>(ids.data() + begin[i], begin[i + 1] - begin[i]);
  }
};

// The values a value is compared with after the walk (its copies in the other
// derived replicas), for the values of a slice that have any.
using Partners = absl::flat_hash_map<ir::ValueId, absl::InlinedVector<ir::ValueId, 3>>;

// What the encoding reads besides the plan: the partition's per-item and
// per-value arrays.
struct EncodeInputs {
  const ir::Graph& spec;
  const ir::Plan& plan;
  const SlicedPlan* sliced;
  const ir::MicrobatchMap* mbmap;
  const std::vector<int>* share_group;  // per value, -1 for none; may be null
  const std::vector<int>& item_stage;
  absl::Span<const int64_t> producer;   // per value, -1 for none
  const FlatIds& inputs;
  const FlatIds& outputs;
  const Partners& partners;
  absl::Span<const int> listing;        // per value, how the final checks list it
};

// Writes the signature of the stage with index `index` into `sig` (cleared
// first; its buffers are reused from stage to stage) and gives the stage its
// renaming (Stage::values, ops, tensors).
void EncodeStage(const EncodeInputs& in, int index, Stage& stage, RenameTables& tables,
                 Signature& sig);

}  // namespace loom::verify::stage_encoding

#endif  // LOOM_VERIFY_STAGE_ENCODING_H_
