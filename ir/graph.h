#ifndef LOOM_IR_GRAPH_H_
#define LOOM_IR_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/shape.h"

namespace loom::ir {

using TensorId = int32_t;
using OpId = int32_t;
inline constexpr int32_t kNoId = -1;

// X(enumerator, textual name). Sorted by name.
#define LOOM_TENSOR_ROLE_LIST(X) \
  X(kActivation, "activation")   \
  X(kGradient, "gradient")       \
  X(kInput, "input")             \
  X(kLoss, "loss")               \
  X(kOptimizerState, "state")    \
  X(kParameter, "parameter")

enum class TensorRole {
#define LOOM_ROLE_ENUM_(e, name) e,
  LOOM_TENSOR_ROLE_LIST(LOOM_ROLE_ENUM_)
#undef LOOM_ROLE_ENUM_
};
absl::string_view TensorRoleName(TensorRole role);
absl::StatusOr<TensorRole> ParseTensorRole(absl::string_view name);

#define LOOM_PHASE_LIST(X)   \
  X(kBackward, "backward")   \
  X(kForward, "forward")     \
  X(kOptimizer, "optimizer")

enum class Phase {
#define LOOM_PHASE_ENUM_(e, name) e,
  LOOM_PHASE_LIST(LOOM_PHASE_ENUM_)
#undef LOOM_PHASE_ENUM_
};
absl::string_view PhaseName(Phase phase);
absl::StatusOr<Phase> ParsePhase(absl::string_view name);

// Shape and element type of a tensor: what shape inference computes.
struct TensorType {
  Shape shape;
  DType dtype = DType::kF32;
  std::string ToString() const;  // "f32[2,3]"
  bool operator==(const TensorType& o) const { return shape == o.shape && dtype == o.dtype; }
};

struct Tensor {
  TensorId id = kNoId;
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  TensorRole role = TensorRole::kActivation;
  OpId producer = kNoId;  // kNoId for graph inputs (data, parameters, optimizer state)
  int output_index = -1;  // which output of `producer`

  TensorType type() const { return {shape, dtype}; }
  bool operator==(const Tensor& o) const;
};

// Where an op sits in the training iteration.
struct OpInfo {
  Phase phase = Phase::kForward;
  int layer = -1;       // repeated block the op belongs to; -1 = none
  int microbatch = -1;  // micro-batch it computes; -1 = all / none
};

struct Op {
  OpId id = kNoId;
  OpKind kind = OpKind::kAdd;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  AttrMap attrs;
  OpInfo info;

  bool operator==(const Op& o) const;
};

// Name and role of one op output.
struct OutputSpec {
  std::string name;
  TensorRole role = TensorRole::kActivation;
};

// An SSA dataflow DAG of one training iteration (or of a forward pass).
// Ids are dense and in creation order; an op's inputs always exist before the op,
// so creation order is a topological order. Tensor names are unique.
// The largest tensor a graph holds, in bytes: every element count and byte size
// of one tensor, and their sums over a model's tensors, stay far from overflow.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 50;
// Layer tags and micro-batch counts Loom accepts, the same from flags, YAML
// configurations, graph files, plan files and Python (the largest models have
// about 130 layers; a plan's size and a proof's time grow with both).
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxMicrobatches = 1024;

class Graph {
 public:
  explicit Graph(std::string name = "") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Declares a tensor without producer: data input, parameter or optimizer state.
  absl::StatusOr<TensorId> AddInput(std::string name, Shape shape, DType dtype,
                                    TensorRole role);

  // Appends an op, inferring its output types with the op's schema. `outputs` gives
  // one name (and role) per output; names must be unused. Errors name the op kind,
  // its first output and the offending input.
  absl::StatusOr<std::vector<TensorId>> AddOp(OpKind kind, std::vector<TensorId> inputs,
                                              AttrMap attrs, OpInfo info,
                                              std::vector<OutputSpec> outputs);

  // Returns `base` if unused, else `base.2`, `base.3`, ...
  std::string UniqueName(absl::string_view base) const;

  // Marks a tensor as an output of the iteration (loss, updated parameters, ...).
  void AddOutput(TensorId id);
  const std::vector<TensorId>& outputs() const { return outputs_; }

  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  int num_ops() const { return static_cast<int>(ops_.size()); }
  const Tensor& tensor(TensorId id) const { return tensors_[id]; }
  // Gives a tensor's dims the names of `named` (names are printed, never computed
  // with). The dims themselves never change after AddInput or AddOp, whose
  // inference fixed them: false, and nothing changed, when `named`'s dims differ.
  bool SetDimNames(TensorId id, const Shape& named);
  const Op& op(OpId id) const { return ops_[id]; }
  absl::Span<const Tensor> tensors() const { return tensors_; }
  absl::Span<const Op> ops() const { return ops_; }
  std::optional<TensorId> FindTensor(absl::string_view name) const;

  // Ops reading `id`, in op order (an op reading it twice appears twice).
  const std::vector<OpId>& consumers(TensorId id) const { return consumers_[id]; }
  // Ops reading any output of `op`, in op order (with multiplicity).
  const std::vector<OpId>& successors(OpId op) const { return successors_[op]; }

  // Tensors without producer, in id order.
  std::vector<TensorId> InputIds() const;
  // Sum of element counts of the tensors with the given role and no producer.
  int64_t CountElements(TensorRole role) const;

  // Re-checks every op against its schema (arity, output types) and the SSA rules.
  absl::Status Validate() const;

  // Structural equality: names, ids, types, roles, ops, attributes, outputs.
  bool operator==(const Graph& other) const;
  bool operator!=(const Graph& other) const { return !(*this == other); }

 private:
  absl::StatusOr<TensorId> NewTensor(std::string name, TensorType type, TensorRole role,
                                     OpId producer, int output_index);

  std::string name_;
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  std::vector<TensorId> outputs_;
  std::vector<std::vector<OpId>> consumers_;   // by tensor
  std::vector<std::vector<OpId>> successors_;  // by op
  absl::flat_hash_map<std::string, TensorId> by_name_;
  // UniqueName's memo: per base name, the last suffix it found free.
  mutable absl::flat_hash_map<std::string, int> next_suffix_;
};

// "op 'linear' (h.3)": how errors name an op, by kind and first output name.
std::string DescribeOp(const Graph& graph, const Op& op);

}  // namespace loom::ir

#endif  // LOOM_IR_GRAPH_H_
