#ifndef LOOM_IR_OP_SCHEMA_H_
#define LOOM_IR_OP_SCHEMA_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/op_kind.h"
#include "ir/plan.h"

namespace loom::ir {

// ---------------------------------------------------------------------------
// Partition signature: an einsum-like labelling of every input and output dim.
// `matmul`: "m k, k n -> m n" with k a reduction label (splitting it yields partial
// sums of the output). A label that appears in several places must be split the
// same way everywhere.
enum class DimKind {
  kSpatial,    // split it and every tensor carrying it is sliced, outputs too
  kReduction,  // summed away: split it and outputs become partial sums
  kMaxReduction,  // reduced by max: split it and outputs become partial maxima,
                  // combined by a max-reduction
  kLogSumExpReduction,  // a softmax's axis (attention's keys): split it and the op's
                        // outputs (a softmax-weighted value and its log-sum-exp)
                        // become partial softmaxes, merged by attention_merge
  kFixed,      // may not be split (softmax axis, normalised axis, ...)
};

struct DimSignature {
  std::vector<std::vector<std::string>> inputs;   // labels per input dim
  std::vector<std::vector<std::string>> outputs;  // labels per output dim
  std::map<std::string, DimKind> kinds;           // every label used
  // Labels that must be split by the same factor (e.g. query and kv heads in GQA).
  std::vector<std::vector<std::string>> coupled;
  // Inputs added to the result outside the reduction (linear's bias): when a
  // reduction label is split they must arrive as shares of a sum too (one piece
  // keeps the value, the others hold zero), or the sum would count them n times.
  std::vector<int> additive_inputs;
  // Broadcasting (NumPy rules): (label of an input's size-1 dim, the output label it
  // is broadcast along). At sizes where that output dim is 1 the input would read as
  // the dim itself, so shape reduction keeps such output dims above 1.
  std::vector<std::pair<std::string, std::string>> broadcasts;

  // "b s k, n k -> b s n | k:reduce" (fixed labels are listed as `x:fixed`).
  std::string ToString() const;
};

// ---------------------------------------------------------------------------
// Gradient rules emit backward ops through a GradBuilder.
class GradBuilder {
 public:
  virtual ~GradBuilder() = default;

  virtual const Graph& graph() const = 0;
  // The forward op whose gradient is being built.
  virtual const Op& op() const = 0;
  // Gradient of the op's i-th output, if any consumer of it needed one.
  virtual std::optional<TensorId> grad_output(int i) const = 0;

  // Emits a backward op (phase backward, the forward op's layer and micro-batch).
  // `name` is a hint made unique. Outputs get role gradient.
  virtual absl::StatusOr<std::vector<TensorId>> Emit(OpKind kind,
                                                     std::vector<TensorId> inputs,
                                                     AttrMap attrs,
                                                     absl::string_view name) = 0;

  // Conveniences built on the interface above.
  TensorId input(int i) const { return op().inputs[i]; }
  TensorId output(int i) const { return op().outputs[i]; }
  const TensorType input_type(int i) const { return graph().tensor(input(i)).type(); }
  absl::StatusOr<TensorId> Emit1(OpKind kind, std::vector<TensorId> inputs,
                                 AttrMap attrs, absl::string_view name);
  // Name hint for the gradient of input i: "d.<input name>".
  std::string GradName(int i) const;
  // The gradient of output i, or a zero tensor of its type when it has none.
  absl::StatusOr<TensorId> GradOutputOrZeros(int i);
};

// Returns one entry per op input: the tensor holding d(loss)/d(input), or nullopt
// when the input gets no gradient (integer data, indices, stop-gradient).
using GradFn = absl::StatusOr<std::vector<std::optional<TensorId>>> (*)(GradBuilder& b);

// ---------------------------------------------------------------------------
using InferFn = absl::StatusOr<std::vector<TensorType>> (*)(absl::Span<const TensorType> in,
                                                            const AttrMap& attrs);
using SignatureFn = absl::StatusOr<DimSignature> (*)(absl::Span<const TensorType> in,
                                                     const AttrMap& attrs);
// Reference CPU kernel. `out` arrives shaped (as inferred) and zero-filled.
using KernelFn = absl::Status (*)(absl::Span<const HostTensor* const> in, const AttrMap& attrs,
                                  absl::Span<HostTensor> out);
// Floating-point operations of one execution (a multiply-add counts 2).
using FlopsFn = double (*)(absl::Span<const TensorType> in, absl::Span<const TensorType> out,
                           const AttrMap& attrs);

// Attributes of one piece of a split op. `in` / `out` are the logical types and
// `in_boxes` / `out_boxes` the index regions the piece reads and writes. Ops whose
// attributes depend on sizes or offsets (reshape's shape, an embedding's vocabulary
// range, the token count a loss divides by) rewrite them here.
// Whether two attribute maps of an op compute the same on operands of types `in`
// (a causal attention whose block sees every key of its chunk is a full one; only
// the difference of its offsets places its mask).
using SameComputationFn = bool (*)(const AttrMap& a, const AttrMap& b,
                                   absl::Span<const TensorType> in);

using ShardAttrsFn = absl::StatusOr<AttrMap> (*)(const AttrMap& attrs,
                                                 absl::Span<const TensorType> in,
                                                 absl::Span<const Box> in_boxes,
                                                 absl::Span<const TensorType> out,
                                                 absl::Span<const Box> out_boxes);

// ---------------------------------------------------------------------------
// What the verifier may assume of an op beyond its shapes and partition
// signature. The derivation (verify/derive.h) lets partial sums and scaled
// values through an op only where these say so, and proves every use as a law
// (verify/laws.h); tests/verify/homogeneity_test.cc checks each group on the
// op's reference kernel.

// Input positions in which the output is homogeneous: scaling every operand of
// the group by k scales the output by k^exponent.
struct InputGroup {
  std::vector<int> positions;
  int exponent = 1;
};

// What an attribute means to the verifier. An attribute with no role is part of
// the computation: a piece whose value differs computes something else.
enum class AttrRole {
  kFactor,     // the output is proportional to it (scale's factor)
  kDivisor,    // the output is inversely proportional to it (a mean's count)
  kOffset,     // the piece's offset in the op's index space (an embedding's vocab_begin)
  kPosition,   // a position along the op's `dim` (slice's begin): scales with that dim
  kPositions,  // a list of lengths along the op's `dim` (split's sizes), likewise
};
struct AttrUse {
  std::string name;
  AttrRole role;
};

// A causal mask between two labels of an op (attention's queries s and keys t):
// with the op's `causal` attribute set (default 1), position i of `queries` sees
// position j of `keys` where k_offset + j <= q_offset + i (its q_offset and
// k_offset attributes, default 0). A piece pairing a block of queries with a chunk
// of keys holds nothing for the keys after the block's last query and the queries
// before the chunk's first key; the verifier's reductions reach over them.
struct CausalMask {
  std::string queries;
  std::string keys;
};

// The attributes of an op at other sizes, for ops whose attributes size a dim
// that only an output carries (fill's shape, expand's size, a vocabulary):
// `label_sizes` gives the new size of such labels of `sig`, `old_out` the output
// types at the old sizes and `new_in` the input types at the new ones.
using ResizeAttrsFn = absl::StatusOr<AttrMap> (*)(
    const AttrMap& attrs, const DimSignature& sig, absl::Span<const TensorType> old_out,
    absl::Span<const TensorType> new_in, const std::map<std::string, int64_t>& label_sizes);

// Everything an op kind knows, in one place. Adding an op = one list entry in
// ir/op_kind.h and one schema (docs/ir.md, "Adding an op").
struct OpSchema {
  OpKind kind = OpKind::kAdd;
  InferFn infer = nullptr;          // required
  SignatureFn signature = nullptr;  // required
  KernelFn kernel = nullptr;        // required
  FlopsFn flops = nullptr;          // required
  GradFn grad = nullptr;            // nullptr: the op has no backward rule
  std::string doc;                  // one line: inputs, outputs, attributes
  ShardAttrsFn shard_attrs = nullptr;  // nullptr: a piece keeps the op's attributes
  // nullptr: attribute maps that differ compute differently.
  SameComputationFn same_computation = nullptr;
  // The output does not depend on the order of the operands (add, mul,
  // accumulate): a piece may read them in any order.
  bool commutative = false;
  // The attribute names the op reads: those its doc lists between braces after its
  // inputs ("rmsnorm(x, gamma) {eps=1e-5} -> ..."), filled at registration. An
  // attribute of another name is an error (InferOutputTypes), never ignored.
  std::vector<std::string> attributes = {};

  // The verifier's facts (above); an op declares none by default: no partial sum
  // or scaled value passes through it and every attribute is computation.
  // Groups of input positions in which the op is jointly linear: a piece may hold
  // partial sums there, and the pieces' outputs add up to the op's output.
  std::vector<std::vector<int>> linear_in = {};
  bool linear_in_every_input = false;  // one group of all inputs, however many (accumulate)
  // cast: the identity over the reals where it makes a float from a float or an
  // integer (a token count); truncating to an integer, or from bool, is not linear.
  bool linear_into_floats_only = false;
  // Further homogeneous groups: a gradient op's incoming gradient, a divisor (-1).
  std::vector<InputGroup> homogeneous_in = {};
  // The output is the sum of the operands, in any order (add, accumulate).
  bool sums_operands = false;
  std::vector<AttrUse> attr_roles = {};
  ResizeAttrsFn resize_attrs = nullptr;  // nullptr: no attribute sizes an output-only dim
  // An MoE routing op: integer routing indices place tokens into expert slots.
  bool routes_tokens = false;
  std::optional<CausalMask> causal_mask = std::nullopt;

  // Declarations, chained after registration:
  //   reg(OpKind::kScale, ...).Linear({{0}}).Attr("factor", AttrRole::kFactor);
  OpSchema& Linear(std::vector<std::vector<int>> groups);
  OpSchema& LinearInEveryInput();
  OpSchema& LinearIntoFloatsOnly();
  OpSchema& Homogeneous(std::vector<int> positions, int exponent);
  OpSchema& SumsOperands();
  OpSchema& Attr(std::string name, AttrRole role);
  OpSchema& Resizes(ResizeAttrsFn fn);
  OpSchema& RoutesTokens();
  OpSchema& Causal(std::string queries, std::string keys);
  OpSchema& SameComputation(SameComputationFn fn);

  // The role of attribute `name`, if it has one.
  std::optional<AttrRole> RoleOf(absl::string_view name) const;
};

// Where an op's causal mask lets query i see key j (j <= i + shift, positions
// within the op): its q_offset minus its k_offset. nullopt where the op has no
// causal mask or its `causal` attribute is 0.
std::optional<int64_t> CausalShift(const OpSchema& schema, const AttrMap& attrs);

// The registry: every OpKind has exactly one schema.
const OpSchema& GetOpSchema(OpKind kind);

// Checks arity against ir/op_kind.h, then runs the schema's shape inference.
absl::StatusOr<std::vector<TensorType>> InferOutputTypes(OpKind kind,
                                                         absl::Span<const TensorType> in,
                                                         const AttrMap& attrs);

// Per-family registration (ir/ops/*.cc), called once by the registry.
class SchemaTable {
 public:
  // Returns the stored schema, for the declarations chained after it.
  OpSchema& Register(OpSchema schema);
  // Checks what registration cannot see yet: every attribute with a role is one
  // the op reads. Aborts naming the op otherwise.
  void CheckDeclarations() const;
  const OpSchema* Find(OpKind kind) const;

 private:
  std::vector<std::optional<OpSchema>> schemas_ =
      std::vector<std::optional<OpSchema>>(kNumOpKinds);
};

}  // namespace loom::ir

#endif  // LOOM_IR_OP_SCHEMA_H_
