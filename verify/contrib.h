#ifndef LOOM_VERIFY_CONTRIB_H_
#define LOOM_VERIFY_CONTRIB_H_

// Contributions: what a plan value holds relative to the box of its logical
// tensor (see verify/derive.h), interned so that equal contributions share an id,
// and the exact arithmetic of summing them.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ir/plan.h"
#include "verify/findings.h"

namespace loom::verify {

using ContribId = int32_t;
inline constexpr ContribId kFullContrib = 0;
inline constexpr ContribId kZeroContrib = 1;
inline constexpr ContribId kBadContrib = 2;  // not derivable; failure already recorded

struct Contrib {
  enum Kind { kFull, kZero, kBad, kRed, kLin, kShare, kScaled };
  Kind kind = kBad;
  int family = -1;              // kRed: the reduction
  std::vector<ir::Box> chunks;  // kRed: disjoint boxes of its index space, sorted
  std::vector<int> additive;    // kRed: copies of each additive input included
  int desc = -1;                // kLin: the linear op piece
  std::vector<ContribId> parts; // kLin: contribution at each linear position
  // kShare: an opaque share, part `part` of tensor `tensor` over the box chunks[0]:
  // a value known only through its claim, whose group of shares adds up to the
  // complete value (checked where the group is produced; see verify/derive.h).
  ir::TensorId tensor = ir::kNoId;
  ir::ValuePart part;
  // kShare, even: the share of a value each member holds whole, `part` of it (the
  // part's length times the value), where it meets Partial(avg) pieces in a linear
  // op (Deriver::AsEvenShares). Even shares add up with even shares alone.
  bool even = false;
  // kScaled: `factor` times the contribution `base` (never itself scaled, zero or
  // bad; factor never 0 or 1). Scales appear only at the top of a contribution:
  // reductions and linear pieces are made of unscaled parts.
  ContribId base = -1;
  ir::Rational factor = ir::Rational::One();
};

// A reduction: op output `key` summed (or maxed) over the index space of `labels`.
struct Family {
  ir::OpId op = ir::kNoId;  // the op whose output it reduces
  int output = 0;           // which output of it
  std::string key;          // "<op>/<rest>": the op id first
  std::vector<std::string> labels;
  std::vector<int64_t> extents;
  ir::ReduceOp reduce = ir::ReduceOp::kSum;
  int num_additive = 0;
  std::string what;  // "linear -> 'h1'"
};

class ContribStore {
 public:
  ContribStore();

  int InternFamily(Family family);
  // A linear op piece: `what` names the op ("add -> 'h'"), `operands` its linear
  // positions ("operand 1 ('h.attn')"), one per part of its contributions.
  // A piece of output `output` of `op`: `shape` names its labels, extents and
  // linear positions, `bounds` its interval along each label.
  int InternDesc(ir::OpId op, int output, const std::string& shape,
                 std::vector<ir::Interval> bounds, const std::string& what,
                 std::vector<std::string> operands);
  ContribId Red(int family, std::vector<ir::Box> chunks, std::vector<int> additive);
  ContribId Lin(int desc, std::vector<ContribId> parts);
  // An opaque share (Contrib::kShare); the full part gives kFullContrib, the
  // empty one kZeroContrib. `name` names the tensor in messages.
  ContribId Share(ir::TensorId tensor, const ir::Box& box, const ir::ValuePart& part,
                  const std::string& name);
  // An even share (Contrib::kShare, even): `part` of a value held whole.
  ContribId EvenShare(ir::TensorId tensor, const ir::Box& box, const ir::ValuePart& part,
                      const std::string& name);
  // The member's part of a contribution that is one of n equal members' shares of
  // a sum: a chunk k of n equal chunks of one reduced label, a share [k/n, (k+1)/n),
  // a linear piece whose operands hold the same one; with n. nullopt otherwise.
  struct MemberPart {
    ir::ValuePart part;
    int64_t members = 0;
  };
  std::optional<MemberPart> MemberPartOf(ContribId id) const;
  // `factor` times what `id` holds (zeros stay zeros; a factor of 1 is `id`).
  // kBadContrib when the factor leaves 64 bits.
  ContribId Scaled(ContribId id, const ir::Rational& factor);
  // What `id` holds as an unscaled contribution times a factor (1 unless scaled).
  struct Unscaled {
    ContribId base = kFullContrib;
    ir::Rational factor = ir::Rational::One();
  };
  Unscaled Unscale(ContribId id) const;

  const Contrib& get(ContribId id) const { return contribs_[id]; }

  // The contribution with the op of every reduction and linear piece in it
  // replaced by map(op) (the same contribution of another micro-batch's copy of
  // the ops); `name(op, output)` names a mapped op's output for messages. The
  // tensor of every opaque share is replaced by map_tensor(t) (identity when
  // empty); `tensor_name` names a mapped tensor. Every call on one store must name
  // an op or a tensor alike: a reduction, a linear piece or a share moved to an op
  // or a tensor once is remembered.
  ContribId MapOps(ContribId id, const std::function<ir::OpId(ir::OpId)>& map,
                   const std::function<std::string(ir::OpId, int)>& name,
                   const std::function<ir::TensorId(ir::TensorId)>& map_tensor = {},
                   const std::function<std::string(ir::TensorId)>& tensor_name = {});
  // For contributions `a` and `b` of one structure (same kinds, reductions,
  // pieces and chunk counts) whose chunk bounds differ: the contribution whose
  // bounds are a + t (b - a), bound by bound. nullopt when the structures differ
  // or a bound leaves its reduction's index space.
  std::optional<ContribId> Extrapolate(ContribId a, ContribId b, int64_t t);
  // The sum over r = 0..n-1 of Extrapolate(a, b, r) in closed form, where it has
  // one: chunks of a reduction that move by their own width along one dim
  // (replica r holding the r-th slice of a split batch), position by position in
  // linear pieces, zeros. nullopt otherwise (sum the n terms instead); never a
  // result the n-term sum would not give.
  std::optional<ContribId> ProgressionSum(ContribId a, ContribId b, int64_t n);
  const Family& family(int id) const { return families_[id]; }
  std::string Describe(ContribId id) const;
  // A concrete reading of what a value holding `id` holds, one clause: every term
  // of the partial sums it holds set to 1 (term j of a maximum set to j), e.g.
  // "with every term of the sum over k (32 terms) equal to 1: it holds 16 (chunk
  // [0:16]) where the complete value is 32". Empty for kBad.
  std::string Example(ContribId id) const;
  // Whether `id` holds a chunk of a reduction somewhere (kRed, or kLin with such a
  // part), as opposed to only complete values and zeros.
  bool HoldsPartialSum(ContribId id) const;

  struct SumResult {
    bool ok = true;
    ContribId id = kBadContrib;
    FailureClass cls = FailureClass::kComputationDiffers;
    std::string message;  // on failure: "adds 2 copies of the complete value"
    std::string counterexample;  // on failure: one line with concrete numbers
  };
  // The contribution of the sum (or maximum) of values holding `ids` over one box.
  // Values scaled alike sum to their unscaled sum scaled so; copies of the
  // complete value sum to that many times it; values scaled differently make no
  // contribution (a failure of class scaled).
  SumResult Sum(absl::Span<const ContribId> ids, ir::ReduceOp reduce);

 private:
  ContribId Intern(Contrib c);
  // Sum for unscaled contributions.
  SumResult SumUnscaled(absl::Span<const ContribId> ids, ir::ReduceOp reduce);
  // SumUnscaled's cases, over `live` (its non-zero members, `first` a copy of
  // the first one's contribution, all of one kind): `full` of them copies of the
  // complete value; shares of one value; chunks of one reduction; linear pieces
  // of one op output.
  SumResult SumWithComplete(const std::vector<ContribId>& live, int full, bool is_max);
  // The merge of partial softmaxes (ReduceOp::kLogSumExp).
  SumResult MergeUnscaled(absl::Span<const ContribId> ids);
  SumResult SumShares(const std::vector<ContribId>& live, const Contrib& first, bool is_max);
  SumResult SumChunks(const std::vector<ContribId>& live, const Contrib& first,
                      ir::ReduceOp reduce);
  SumResult SumLinear(const std::vector<ContribId>& live, const Contrib& first,
                      ir::ReduceOp reduce);

  std::vector<Contrib> contribs_;
  absl::flat_hash_map<std::string, ContribId> contrib_ids_;
  std::vector<Family> families_;
  absl::flat_hash_map<std::string, int> family_ids_;
  struct Desc {
    ir::OpId op = ir::kNoId;
    int output = 0;
    std::string shape;
    std::vector<ir::Interval> bounds;
    std::string what;
    std::vector<std::string> operands;
  };
  std::vector<Desc> descs_;
  absl::flat_hash_map<std::string, int> desc_ids_;
  absl::flat_hash_map<ir::TensorId, std::string> share_names_;
  // MapOps: families and descriptions moved to another op, shares to another tensor.
  absl::flat_hash_map<std::pair<int, ir::OpId>, int> moved_families_, moved_descs_;
  absl::flat_hash_map<std::pair<ContribId, ir::TensorId>, ContribId> moved_shares_;
};

}  // namespace loom::verify

#endif  // LOOM_VERIFY_CONTRIB_H_
