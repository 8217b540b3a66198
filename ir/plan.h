#ifndef LOOM_IR_PLAN_H_
#define LOOM_IR_PLAN_H_

// The distributed plan: per-device tasks and the collectives between them, each
// value tagged with the piece of a logical tensor it claims to hold (its lineage).
// Plans are written explicit (every device, every micro-batch) or factored (one
// scale unit for micro-batch 0 plus replication rules); ExpandPlan turns the second
// into the first exactly. The claims are what the verifier checks, never facts.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/autodiff.h"
#include "ir/graph.h"
#include "ir/op_kind.h"
#include "ir/shape.h"

namespace loom::ir {

// ---------------------------------------------------------------------------
// Device mesh: named axes, outermost first; device ids are row-major over them.
struct MeshAxis {
  std::string name;  // dp, pp, tp, sp, cp, ep
  int64_t size = 1;
};

class Mesh {
 public:
  Mesh() = default;
  explicit Mesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {}

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int64_t num_devices() const;
  // Index of the axis called `name`, or -1.
  int AxisIndex(absl::string_view name) const;
  int64_t AxisSize(absl::string_view name) const;  // 1 when absent
  std::vector<int64_t> Coordinates(int64_t device) const;
  int64_t Device(absl::Span<const int64_t> coordinates) const;
  // Devices that differ from `device` only along `axis`, in axis order.
  std::vector<int64_t> Group(int64_t device, int axis) const;
  std::string ToString() const;  // "dp=2 x pp=2 x tp=2"
  bool operator==(const Mesh& o) const;

 private:
  std::vector<MeshAxis> axes_;
};

// ---------------------------------------------------------------------------
// An exact rational, always normalised (gcd 1, den > 0). Value parts use only
// non-negative ones; a claim's scale may be any non-zero one.
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
  static Rational Of(int64_t num, int64_t den);
  static Rational One() { return Rational{1, 1}; }
  bool operator==(const Rational& o) const { return num == o.num && den == o.den; }
  bool operator!=(const Rational& o) const { return !(*this == o); }
  bool operator<(const Rational& o) const;
  bool IsOne() const { return num == 1 && den == 1; }
  std::string ToString() const;  // "1/4", "0", "1", "-3/2"
  double ToDouble() const { return static_cast<double>(num) / static_cast<double>(den); }
};
// a * b and a / b exactly; nullopt where the result leaves 64 bits (or b is zero).
std::optional<Rational> Multiply(const Rational& a, const Rational& b);
std::optional<Rational> Divide(const Rational& a, const Rational& b);
// The rational with the smallest denominator (at most 2^24) whose double is `x`
// exactly: 0.5 -> 1/2, the double nearest 1/3 -> 1/3; nullopt when there is none.
std::optional<Rational> RationalOfDouble(double x);
// A signed rational as text: "3", "-1/4"; InvalidArgument otherwise.
absl::StatusOr<Rational> ParseSignedRational(absl::string_view text);

// Which share of a sum a value holds: a set of disjoint half-open intervals of
// [0, 1). The full value is [0, 1); a zero tensor is the empty set. Splitting a
// reduction dim n ways gives Share(k, n); adding values with disjoint parts gives
// their union. Replicas have equal parts and must never meet in one sum.
class ValuePart {
 public:
  struct Piece {
    Rational lo, hi;
    bool operator==(const Piece& o) const { return lo == o.lo && hi == o.hi; }
  };
  static ValuePart Full();
  static ValuePart Empty();
  // The k-th of n equal refinements of every piece.
  ValuePart Share(int64_t k, int64_t n) const;
  // The fraction [lo, hi) of every piece (a reduction split again along another of
  // its dims); 0 <= lo <= hi <= 1, else empty.
  ValuePart Refine(const Rational& lo, const Rational& hi) const;
  // n where the part is one of n > 1 equal shares of the whole, [k/n, (k+1)/n).
  std::optional<int64_t> EqualShareCount() const;
  bool IsFull() const;
  bool IsEmpty() const { return pieces_.empty(); }
  bool Disjoint(const ValuePart& o) const;
  // Union of disjoint parts; error when they overlap.
  absl::StatusOr<ValuePart> Union(const ValuePart& o) const;
  using Pieces = absl::InlinedVector<Piece, 1>;  // one piece, held in place, for most values
  const Pieces& pieces() const { return pieces_; }
  // "full", "0", "[0,1/2)", "[0,1/4)+[1/2,3/4)".
  std::string ToString() const;
  static absl::StatusOr<ValuePart> Parse(absl::string_view text);
  bool operator==(const ValuePart& o) const { return pieces_ == o.pieces_; }
  bool operator!=(const ValuePart& o) const { return !(*this == o); }

 private:
  Pieces pieces_;  // sorted, disjoint, adjacent pieces merged
};

// ---------------------------------------------------------------------------
struct Interval {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Interval& o) const { return begin == o.begin && end == o.end; }
};
// An index region of a tensor: one interval per dim, held in place up to rank 4
// (a plan holds one per value, and its checks read every one). References into a
// box do not outlive the value holding it.
using Box = absl::InlinedVector<Interval, 4>;
Box FullBox(const Shape& shape);
std::vector<int64_t> BoxDims(const Box& box);
std::string BoxToString(const Box& box);  // "[0:2,4:8]"
std::optional<Box> Intersect(const Box& a, const Box& b);
bool Contains(const Box& outer, const Box& inner);

// How shares of a value combine: by sum (partial sums, the usual case) or by max
// (partial maxima, e.g. a softmax's row maximum over a vocabulary piece). A
// collective may also average (kAvg: the sum times 1 / its members, as NCCL's
// ncclAvg and torch's ReduceOp.AVG); shares never combine by it.
// A softmax over a split axis (kLogSumExp: attention over a chunk of its keys)
// leaves pairs of shares, a weighted value and its log-sum-exp, that merge by the
// online-softmax identity (attention_merge); no collective reduces by it.
enum class ReduceOp { kSum, kMax, kAvg, kLogSumExp };
absl::string_view ReduceOpName(ReduceOp op);  // "sum", "max", "avg", "logsumexp"

// A piece of a logical tensor: index region and value share, times `scale`. A
// share that is neither full nor empty combines with the others by `combine`.
// `scale` says the value is that multiple of the piece (1 unless a program scales
// a value on its way: a rank's gradient of its own mean loss holds n times its
// share of the mean over n ranks' tokens until an average divides it).
struct SubTensor {
  TensorId tensor = kNoId;
  Box box;
  ValuePart part = ValuePart::Full();
  ReduceOp combine = ReduceOp::kSum;
  Rational scale = Rational::One();
  bool operator==(const SubTensor& o) const {
    return tensor == o.tensor && box == o.box && part == o.part && combine == o.combine &&
           scale == o.scale;
  }
};

// ---------------------------------------------------------------------------
// X(enumerator, name). Sorted by name.
#define LOOM_COLLECTIVE_KIND_LIST(X)   \
  X(kAllGather, "all_gather")          \
  X(kAllReduce, "all_reduce")          \
  X(kAllToAll, "all_to_all")           \
  X(kBroadcast, "broadcast")           \
  X(kReduceScatter, "reduce_scatter")  \
  X(kSendRecv, "send_recv")

enum class CollectiveKind {
#define LOOM_COLLECTIVE_ENUM_(e, name) e,
  LOOM_COLLECTIVE_KIND_LIST(LOOM_COLLECTIVE_ENUM_)
#undef LOOM_COLLECTIVE_ENUM_
};
absl::string_view CollectiveKindName(CollectiveKind kind);
absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name);

using ValueId = int32_t;
using TaskId = int32_t;
using CollectiveId = int32_t;

// A buffer on one device.
struct PlanValue {
  ValueId id = kNoId;
  int64_t device = 0;
  SubTensor sub;             // the lineage claim
  DType dtype = DType::kF32;
  int microbatch = -1;
  // Factored plans only: how the value changes in data-parallel replica r.
  // dp_dim >= 0: the box along that dim moves by r * its extent (data split over dp).
  // dp_share: the part becomes Share(r, dp) of the unit's part (a dp partial sum).
  int dp_dim = -1;
  bool dp_share = false;
};

// One op instance on one device. `op` is the logical op it computes a piece of;
// kNoId for local data movement the transform inserted (slice, concat, accumulate,
// fill for a zero share).
struct Task {
  TaskId id = kNoId;
  OpId op = kNoId;
  OpKind kind = OpKind::kAdd;
  AttrMap attrs;  // rewritten for the piece (reshape shapes, split sizes, ...)
  int64_t device = 0;
  OpInfo info;     // phase, layer, micro-batch
  int stage = -1;  // pipeline stage (virtual stage index), -1 when none
  bool recompute = false;  // a forward op re-run before its backward
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // Factored plans only: integer attributes that depend on the data-parallel
  // replica. In replica r, attribute `name` becomes its value + r * step (a slice
  // cutting replica r's rows out of a replicated value: begin and end step by the
  // rows per replica).
  std::map<std::string, int64_t> dp_attr_steps;
};

// A collective over a device group in rank order. inputs[i] / outputs[i] belong to
// devices[i]. send_recv: devices {src, dst}, one input (on src), one output (on dst).
// all_gather / reduce_scatter: `dim` is the gathered / scattered dim.
// all_to_all: the input is split along `dim` and the pieces concatenated along `dim2`.
// broadcast: inputs hold only the root's value (devices[0]).
struct Collective {
  CollectiveId id = kNoId;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ReduceOp reduce = ReduceOp::kSum;
  std::vector<int64_t> devices;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  int dim = -1;
  int dim2 = -1;
  int microbatch = -1;
  // The op whose input it prepares: its phase and layer, and whether it belongs to
  // a recomputed forward piece.
  Phase phase = Phase::kForward;
  int layer = -1;
  bool recompute = false;
  // Factored plans only: the group spans every data-parallel replica: expanded,
  // `devices` lists unit devices d as d + r * dp_device_stride for each replica r.
  bool spans_dp = false;
};

// One step of a device's program. In a factored plan's order, `microbatch` says
// which copy of a micro-batch-tagged item runs (0..M-1); it is -1 for an untagged
// item and in an explicit plan's order.
struct PlanStep {
  bool is_collective = false;
  int32_t id = kNoId;
  int32_t microbatch = -1;
  bool operator==(const PlanStep& o) const {
    return is_collective == o.is_collective && id == o.id && microbatch == o.microbatch;
  }
};

// A run of a factored plan's program: the steps of `segment`, each as its copy
// `microbatch` (-1 for untagged items).
struct OrderRun {
  int32_t segment = 0;
  int32_t microbatch = -1;
  bool operator==(const OrderRun& o) const {
    return segment == o.segment && microbatch == o.microbatch;
  }
};

// The order of a factored plan: one program per device of the scale unit, which
// every data-parallel replica runs on its own copies, stated once per distinct run
// of steps: a steady pipeline repeats a block's steps over every micro-batch.
struct FactoredOrder {
  std::vector<std::vector<PlanStep>> segments;  // their steps' microbatch is -1
  std::vector<std::vector<OrderRun>> programs;  // per unit device
  // No program has a step.
  bool empty() const;
  // Steps of all programs, each copy counted.
  int64_t num_steps() const;
  // Device d's program, each step with its copy.
  std::vector<PlanStep> Program(size_t d) const;
  // Programs cut into maximal runs of one copy, equal runs shared.
  static FactoredOrder FromPrograms(const std::vector<std::vector<PlanStep>>& programs);
  bool operator==(const FactoredOrder& o) const {
    return segments == o.segments && programs == o.programs;
  }
};

// Replication rules of a factored plan.
struct Factoring {
  int64_t dp = 1;                // data-parallel replicas of the scale unit
  int64_t dp_device_stride = 0;  // device id offset between replicas
  int microbatches = 1;          // copies of the micro-batch-0 work per micro-batch
};

// The training step a plan was made from: the zoo model and every parameter that
// shapes its step, so that a command reading the plan rebuilds that very step
// (api::BuildStep of a source) instead of asking for the flags again. Sizes are as
// built (never 0 for "the configuration's"). Plans of other origins (a captured
// torch program, a hand-written plan, plans written before it was recorded) have
// none.
struct PlanStepSource {
  std::string model;  // a zoo model name (loom models)
  bool tiny = false;
  int layers = 0;
  int64_t batch = 0;  // sequences per micro-batch over all replicas
  int64_t seq = 0;    // tokens per sequence
  // Micro-batches, optimizer and its settings, clipping threshold, precision.
  TrainingOptions training;
};
bool operator==(const PlanStepSource& a, const PlanStepSource& b);

struct Plan {
  std::string model;  // what it was made from (free text)
  std::optional<PlanStepSource> step;  // the step it was made from, when recorded
  Mesh mesh;
  std::vector<PlanValue> values;
  std::vector<Task> tasks;
  std::vector<Collective> collectives;
  std::vector<ValueId> outputs;           // values claimed to hold the graph's outputs
  // An explicit plan's order: per device, once scheduled (may be empty).
  std::vector<std::vector<PlanStep>> order;
  // A factored plan's order (may be empty); a factored plan has no `order`.
  FactoredOrder factored_order;
  std::optional<Factoring> factoring;     // set: the plan is factored

  bool is_factored() const { return factoring.has_value(); }
};

// Field-by-field equality (ids, lineage, attributes, order, factoring).
bool operator==(const MeshAxis& a, const MeshAxis& b);
bool operator==(const PlanValue& a, const PlanValue& b);
bool operator==(const Task& a, const Task& b);
bool operator==(const Collective& a, const Collective& b);
bool operator==(const Factoring& a, const Factoring& b);
bool operator==(const Plan& a, const Plan& b);

// Which op / tensor of micro-batch m corresponds to an op / tensor of micro-batch 0
// in a training step built by BuildTrainingStep (same code per micro-batch, so the
// k-th op tagged micro-batch m matches the k-th tagged 0). Checked structurally.
//
// Tagged ops are those with info.microbatch >= 0; every micro-batch 0..M-1 must have
// the same number of them, and op k of micro-batch m must have the kind, attributes
// and input / output counts of op k of micro-batch 0. Their outputs correspond
// position by position. Data inputs (no producer, role input) belong to the
// micro-batch of their first consumer and correspond by ordinal within it; a data
// input without a tagged consumer is untagged. The map holds no reference to `spec`.
class MicrobatchMap {
 public:
  static absl::StatusOr<MicrobatchMap> Build(const Graph& spec);
  int microbatches() const { return microbatches_; }
  // The op / tensor of micro-batch m at the same position as `op0` / `t0` (which may
  // belong to any micro-batch). Identity for ops / tensors not tagged with a
  // micro-batch; kNoId for an id or m out of range.
  OpId Op(OpId op0, int m) const {
    if (op0 < 0 || op0 >= static_cast<OpId>(op_ordinal_.size()) || m < 0 || m >= microbatches_) {
      return kNoId;
    }
    const int k = op_ordinal_[op0];
    return k < 0 ? op0 : ops_[m][k];
  }
  TensorId Tensor(TensorId t0, int m) const {
    if (t0 < 0 || t0 >= static_cast<TensorId>(tensor_ordinal_.size()) || m < 0 ||
        m >= microbatches_) {
      return kNoId;
    }
    const int k = tensor_ordinal_[t0];
    return k < 0 ? t0 : tensors_[m][k];
  }
  // Micro-batch of a tensor (of its producer, or of a data input's first consumer);
  // -1 when untagged or out of range.
  int TensorMicrobatch(TensorId t) const {
    if (t < 0 || t >= static_cast<TensorId>(tensor_microbatch_.size())) return -1;
    return tensor_microbatch_[t];
  }

 private:
  int microbatches_ = 1;
  std::vector<std::vector<OpId>> ops_;          // [m][ordinal]
  std::vector<int> op_ordinal_;                 // by op id (-1 untagged)
  std::vector<int> op_microbatch_;              // by op id (-1 untagged)
  // [m][ordinal]: data inputs of micro-batch m, then outputs of its ops in order.
  std::vector<std::vector<TensorId>> tensors_;
  std::vector<int> tensor_ordinal_;             // by tensor id (-1 untagged)
  std::vector<int> tensor_microbatch_;          // by tensor id (-1 untagged)
};

// The explicit plan a factored plan stands for (an explicit plan is returned as is).
// Items are emitted replica-major: for each replica r = 0..dp-1, every value (then,
// separately, every task, every collective, every output) of the factored plan in
// its order; an item tagged micro-batch 0 becomes M consecutive copies for
// m = 0..M-1, an untagged item one copy; a collective with spans_dp is emitted only
// in replica 0's pass and covers every replica. Ids are dense in that order.
// Per copy (r, m): devices d -> d + r * dp_device_stride; logical op / tensor ids
// and micro-batch tags of tagged items map to micro-batch m (MicrobatchMap); a value
// with dp_dim shifts its box along that dim by r * its extent, a value with dp_share
// gets part Share(r, dp); dp_dim / dp_share are cleared. A task tagged micro-batch 0
// reads copy m of each tagged input; an untagged task reads, in place of each tagged
// input, its M copies in micro-batch order (how gradient accumulation over
// micro-batches is written once). A spans_dp collective replaces unit rank i by the
// dp ranks i * dp + r (device d + r * stride, value copy r), except a broadcast's
// single input, which stays replica 0's. A factored plan's order becomes every
// replica's: device d + r * dp_device_stride runs unit device d's program with each
// step (item, micro-batch m) replaced by copy (r, m) of the item (the one copy of a
// spans_dp collective).
absl::StatusOr<Plan> ExpandPlan(const Graph& spec, const Plan& plan);

// Where the items of a factored plan land in its expansion (ExpandPlan): the
// expanded id of copy (r, m) of each task and collective. Ids of copies of one
// item are consecutive over m.
class ExpansionIds {
 public:
  explicit ExpansionIds(const Plan& plan);
  // Expanded id of copy (r, m) of a factored task / collective (m ignored for an
  // untagged item; r ignored for a spans_dp collective). Ids and indices must be in
  // range.
  TaskId TaskCopy(TaskId t, int64_t r, int m) const;
  CollectiveId CollectiveCopy(CollectiveId c, int64_t r, int m) const;

 private:
  std::vector<int32_t> task_first_;        // per factored task: replica 0's first copy
  std::vector<char> task_tagged_;
  std::vector<int32_t> collective_first_;  // per factored collective: replica 0's first copy
  std::vector<char> collective_tagged_;
  // Per factored collective not spanning dp: its first copy's offset within the
  // block of a later replica; -1 for a spans_dp collective.
  std::vector<int32_t> collective_later_;
  int64_t tasks_per_replica_ = 0;
  int64_t collectives_in_replica0_ = 0;
  int64_t collectives_per_later_replica_ = 0;
};

// Copy (r, m) of a factored plan's value as ExpandPlan makes it: device shifted
// to replica r, tensor and tag mapped to micro-batch m when tagged, box shifted
// along dp_dim and part made Share(r, dp) where the rules say; dp_dim / dp_share
// cleared. The id is left as is.
PlanValue ExpandedValue(const Plan& plan, const MicrobatchMap& mbmap, const PlanValue& value,
                        int64_t r, int m);

// Attributes of replica r's copy of a factored plan's task (dp_attr_steps applied).
AttrMap ExpandedAttrs(const Task& task, int64_t r);

// Checks the replication rules of a factored plan (OK for an explicit one): dp >= 1,
// micro-batches equal to mbmap's, dp * dp_device_stride within the mesh when dp > 1,
// and an order, when there is one, with a program per unit device.
absl::Status ValidateFactoring(const Plan& plan, const MicrobatchMap& mbmap);

// Structural checks of an explicit or factored plan against its spec: ids dense and
// in range, devices in the mesh (in the scale unit when factored), boxes inside
// their tensors, tags consistent with the spec's micro-batches, each value written
// at most once and used on its own device, task value shapes equal to the op's
// inferred types under the task's attributes, collective group sizes and shapes
// consistent, the replication rules of a factored plan (checked without expanding
// it) and the per-device order. Lineage is the verifier's job. Never crashes on
// arbitrary input. Errors name the item and place
// ("plan: task 381 'linear' (device 5, micro-batch 2): input 1: value 99 is on device 4").
absl::Status ValidatePlan(const Graph& spec, const Plan& plan);
// The same with the spec's micro-batch map already built (MicrobatchMap::Build).
absl::Status ValidatePlan(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap);

// ValidatePlan in two parts, for a caller that knows items alike to others it has
// checked in full. The structure: ids, devices, micro-batch tags, operand counts,
// one writer per value, the order. The types (after the structure passed): values'
// boxes against their tensors, tasks against their ops and their inferred types,
// collectives' shapes; items marked in `implied` (by id, where the vectors are
// given) are left out, their types being those of alike items checked here.
struct ImpliedTypes {
  const std::vector<char>* values = nullptr;
  const std::vector<char>* tasks = nullptr;
  const std::vector<char>* collectives = nullptr;
};
absl::Status ValidatePlanStructure(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap);
absl::Status ValidatePlanTypes(const Graph& spec, const Plan& plan, const MicrobatchMap& mbmap,
                               const ImpliedTypes& implied);

// Shape of a value: the extents of its box.
Shape ValueShape(const PlanValue& value);

}  // namespace loom::ir

#endif  // LOOM_IR_PLAN_H_
