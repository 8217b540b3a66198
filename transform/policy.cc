// The Megatron-style partition policy (see transform/parallelize.h).

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "transform/balanced_chunks.h"
#include "transform/parallelize.h"

namespace loom::transform {

using ir::Graph;
using ir::Op;
using ir::OpId;
using ir::OpKind;
using ir::TensorId;
using ir::TensorType;

namespace {

bool IsFree(const Graph& spec, TensorId t) {
  const ir::Tensor& tensor = spec.tensor(t);
  return tensor.producer == ir::kNoId && tensor.role != ir::TensorRole::kInput;
}

// Ops linear in every input: they may run on partial sums. A cast between float
// dtypes counts as linear (it keeps the value over the reals): a mixed-precision
// step's main gradients are cast up before they are reduced.
bool LinearInAllInputs(const Graph& spec, const Op& op) {
  switch (op.kind) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kAccumulate:
    case OpKind::kNeg:
    case OpKind::kScale:
      return true;
    case OpKind::kCast:
      return ir::IsFloat(spec.tensor(op.inputs[0]).dtype) &&
             ir::IsFloat(spec.tensor(op.outputs[0]).dtype);
    default:
      return false;
  }
}

// The parameter an optimizer-state input stands for: itself for a parameter, the
// parameter of a mixed-precision master copy (ir::ParameterOfMaster).
std::optional<TensorId> UpdatedParameter(const Graph& spec, TensorId t) {
  if (spec.tensor(t).role == ir::TensorRole::kParameter && spec.tensor(t).producer == ir::kNoId) {
    return t;
  }
  return ir::ParameterOfMaster(spec, t);
}

// The parameter whose gradient `t` is (a micro-batch's piece of it): followed
// through the step's data flow (casts to main gradients, accumulation, clipping) to
// the optimizer update reading it as its gradient, whose updated tensor is the
// parameter or its master copy. Only a tensor with the parameter's shape, within a
// few steps of the update.
std::optional<TensorId> ParameterOfGradient(const Graph& spec, TensorId t) {
  const ir::Shape& shape = spec.tensor(t).shape;
  std::vector<TensorId> frontier = {t};
  for (int hop = 0; hop < 6 && !frontier.empty(); ++hop) {
    std::vector<TensorId> next;
    for (TensorId x : frontier) {
      for (OpId c : spec.consumers(x)) {
        const Op& op = spec.op(c);
        if ((op.kind == OpKind::kAdamW || op.kind == OpKind::kSgd) && op.inputs.size() >= 2 &&
            op.inputs[1] == x) {
          std::optional<TensorId> param = UpdatedParameter(spec, op.inputs[0]);
          if (param.has_value() && spec.tensor(*param).shape.dims() == shape.dims()) return param;
          continue;
        }
        if (op.info.phase == ir::Phase::kForward || op.outputs.size() != 1) continue;
        if (spec.tensor(op.outputs[0]).shape.dims() != shape.dims()) continue;
        next.push_back(op.outputs[0]);
      }
    }
    frontier = std::move(next);
  }
  return std::nullopt;
}

// Cuts `costs` into `parts` contiguous chunks minimising the largest chunk cost.
std::vector<int> BalancedChunks(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the best max cost of the first i layers in k chunks.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        double c = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (c < best[k][i]) {
          best[k][i] = c;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> chunk_of(n, 0);
  int i = n;
  for (int k = parts; k >= 1; --k) {
    int j = cut[k][i];
    for (int l = j; l < i; ++l) chunk_of[l] = k - 1;
    i = j;
  }
  return chunk_of;
}

class Policy {
 public:
  Policy(const Graph& spec, const Strategy& s) : spec_(spec), s_(s) {}
  absl::StatusOr<PartitionSpec> Run();

 private:
  // An op's input and output types and its dim signature, as Decide reads them.
  struct OpView {
    const Op& op;
    std::vector<TensorType> in, out;
    ir::DimSignature sig;
  };
  // The labels an op splits along grid axis g of n devices: the first candidate
  // whose dims (with the labels coupled to it) divide evenly.
  struct AxisSplit {
    const OpView& view;
    int g;
    int64_t n;
    std::vector<std::string> labels;
  };

  absl::Status AssignStages();
  absl::Status Decide(const Op& op);
  bool Divisible(const ir::DimSignature& sig, absl::Span<const TensorType> in,
                 absl::Span<const TensorType> out, const std::vector<std::string>& labels,
                 int64_t n) const;
  std::vector<std::string> WithCoupled(const ir::DimSignature& sig, const std::string& l) const;
  // The layout input i of `op` arrives in along grid axis g (nullptr: a free input
  // not placed yet).
  const AxisLayout* Produced(const Op& op, size_t i, int g) const;
  // Takes label `l` (with its coupled labels) as the split unless one is chosen or
  // its dims do not divide evenly.
  void TrySplit(AxisSplit& split, const std::string& l) const;
  // Decides the op's split along grid axis g: its split labels, or whether it runs
  // on partial sums there.
  void DecideAxis(const OpView& view, int g);
  // Megatron-LM's tensor-parallel splits of linears, embeddings and expert weights.
  void SplitTensorParallel(AxisSplit& split) const;
  // ZeRO's split over dp of an optimizer update or a gradient accumulation: a dim
  // the tp split left whole, the same one for every op of one parameter.
  void SplitForZero(AxisSplit& split);
  // An update of a master copy, or a weight gradient, split like its parameter.
  void SplitLikeParameter(AxisSplit& split) const;
  // The split of an input that arrives sharded, then sequence parallelism.
  void FollowShardedInputs(AxisSplit& split) const;
  // Whether a linear op runs on the partial sums arriving along grid axis g
  // instead of reducing them first.
  bool RunsOnPartials(const Op& op, int g) const;
  // Places the op's free inputs (parameters, optimizer state) as it reads them.
  void HomeFreeInputs(const Op& op, const OpLayouts& layouts);
  // Records the op's output layouts and where the sequence dim went.
  void RecordOutputs(const Op& op, const ir::DimSignature& sig, const OpLayouts& layouts);

  const Graph& spec_;
  const Strategy& s_;
  PartitionSpec p_;
  std::vector<Layout> layout_;    // produced layout by tensor (empty: free input)
  std::vector<int> seq_dim_;      // dim holding the sequence, by tensor (-1: none)
  absl::flat_hash_map<std::string, int> zero_dim_;  // parameter name -> dim split by ZeRO
  // Grid axis indices (-1 when the axis is absent): dp, then ep when expert
  // parallelism is on or cp when context parallelism is, then tp.
  int kDp = 0;
  int kEp = -1;
  int kCp = -1;
  int kTp = 1;
  std::vector<int64_t> sizes_;
};

absl::Status Policy::AssignStages() {
  const int vstages = s_.pp * s_.vpp;
  int num_layers = 0;
  for (const Op& op : spec_.ops()) num_layers = std::max(num_layers, op.info.layer + 1);
  std::vector<int> stage_of_layer(num_layers, 0);
  if (vstages > 1) {
    std::vector<double> cost(num_layers, 0);
    std::vector<TensorType> in, out;
    for (const Op& op : spec_.ops()) {
      if (op.info.layer < 0 || op.info.phase != ir::Phase::kForward || op.info.microbatch > 0) {
        continue;
      }
      in.clear();
      out.clear();
      for (TensorId t : op.inputs) in.push_back(spec_.tensor(t).type());
      for (TensorId t : op.outputs) out.push_back(spec_.tensor(t).type());
      cost[op.info.layer] += ir::GetOpSchema(op.kind).flops(in, out, op.attrs) + 1;
    }
    stage_of_layer = BalancedChunks(cost, vstages);
  }
  const int n = spec_.num_ops();
  p_.ops.assign(n, OpPartition{});
  std::vector<int> stage(n, -1);
  for (const Op& op : spec_.ops()) {
    if (op.info.layer >= 0) stage[op.id] = stage_of_layer[op.info.layer];
  }
  // Untagged ops: the stage of their largest produced input, the latest among
  // equals (a gradient scaled by the clipping coefficient stays where the gradient
  // is and the scalar travels, as Megatron-LM does); ops without staged producers
  // (constants) take their first consumer's stage.
  for (const Op& op : spec_.ops()) {
    if (stage[op.id] >= 0) continue;
    int best = -1;
    int64_t largest = -1;
    for (TensorId t : op.inputs) {
      OpId prod = spec_.tensor(t).producer;
      if (prod == ir::kNoId) continue;
      const int64_t size = spec_.tensor(t).shape.num_elements();
      if (size > largest || (size == largest && stage[prod] > best)) {
        best = stage[prod];
        largest = size;
      }
    }
    stage[op.id] = best;
  }
  for (OpId id = n - 1; id >= 0; --id) {
    if (stage[id] >= 0) continue;
    int best = std::numeric_limits<int>::max();
    for (TensorId t : spec_.op(id).outputs) {
      for (OpId c : spec_.consumers(t)) {
        if (stage[c] >= 0) best = std::min(best, stage[c]);
      }
    }
    stage[id] = best == std::numeric_limits<int>::max() ? 0 : best;
  }
  // Optimizer updates run wherever their parameter is used (several stages for tied
  // weights); an update of a master copy, wherever the master's parameter is used,
  // and what reads such an update (the cast back to the parameter) runs with it.
  std::vector<bool> homed(n, false);
  for (const Op& op : spec_.ops()) {
    p_.ops[op.id].stages = {stage[op.id]};
    if (op.info.phase != ir::Phase::kOptimizer) continue;
    std::set<int> homes;
    for (TensorId t : op.inputs) {
      std::optional<TensorId> param = UpdatedParameter(spec_, t);
      if (!param.has_value()) continue;
      for (OpId c : spec_.consumers(*param)) {
        if (spec_.op(c).info.phase == ir::Phase::kForward) homes.insert(stage[c]);
      }
    }
    if (homes.empty()) {
      for (TensorId t : op.inputs) {
        const OpId producer = spec_.tensor(t).producer;
        if (producer == ir::kNoId || !homed[producer]) continue;
        homes.insert(p_.ops[producer].stages.begin(), p_.ops[producer].stages.end());
      }
    }
    if (!homes.empty()) {
      p_.ops[op.id].stages.assign(homes.begin(), homes.end());
      homed[op.id] = true;
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Policy::WithCoupled(const ir::DimSignature& sig,
                                             const std::string& l) const {
  for (const auto& group : sig.coupled) {
    if (std::find(group.begin(), group.end(), l) != group.end()) return group;
  }
  return {l};
}

bool Policy::Divisible(const ir::DimSignature& sig, absl::Span<const TensorType> in,
                       absl::Span<const TensorType> out, const std::vector<std::string>& labels,
                       int64_t n) const {
  for (const std::string& l : labels) {
    auto kind = sig.kinds.find(l);
    if (kind == sig.kinds.end() || kind->second == ir::DimKind::kFixed) return false;
  }
  auto check = [&](const std::vector<std::vector<std::string>>& side,
                   absl::Span<const TensorType> types) {
    for (size_t i = 0; i < side.size(); ++i) {
      for (size_t d = 0; d < side[i].size(); ++d) {
        if (std::find(labels.begin(), labels.end(), side[i][d]) == labels.end()) continue;
        int64_t size = types[i].shape.dim(static_cast<int>(d));
        if (size % n != 0 || size < n) return false;
      }
    }
    return true;
  };
  return check(sig.inputs, in) && check(sig.outputs, out);
}

const AxisLayout* Policy::Produced(const Op& op, size_t i, int g) const {
  TensorId t = op.inputs[i];
  if (layout_[t].empty()) return nullptr;
  return &layout_[t][g];
}

void Policy::TrySplit(AxisSplit& split, const std::string& l) const {
  if (!split.labels.empty()) return;
  std::vector<std::string> group = WithCoupled(split.view.sig, l);
  if (Divisible(split.view.sig, split.view.in, split.view.out, group, split.n)) {
    split.labels = group;
  }
}

void Policy::SplitTensorParallel(AxisSplit& split) const {
  const Op& op = split.view.op;
  const std::vector<TensorType>& in = split.view.in;
  const ir::DimSignature& sig = split.view.sig;
  if (op.kind == OpKind::kLinear) {
    const AxisLayout* x = Produced(op, 0, split.g);
    const int last = in[0].shape.rank() - 1;
    if (x != nullptr && x->kind == AxisKind::kSharded && x->dim == last) {
      TrySplit(split, sig.inputs[0][last]);  // row-parallel
    } else {
      TrySplit(split, sig.inputs[1][0]);  // column-parallel
    }
  } else if (op.kind == OpKind::kEmbedding) {
    TrySplit(split, sig.inputs[1][0]);  // vocabulary-parallel
  } else if (op.kind == OpKind::kMatMul && op.inputs.size() == 2 &&
             IsFree(spec_, op.inputs[1]) && in[1].shape.rank() >= 3) {
    // Expert weights ([E, in, out] of a batched matmul) split over the tensor-
    // parallel group like a linear's, as Megatron-LM's expert tensor parallelism
    // does by default: the gate and up projections column-parallel, the down
    // projection row-parallel on their output. Each device then holds its
    // share of its experts and computes their weight gradients on it.
    const AxisLayout* x = Produced(op, 0, split.g);
    const int last = in[0].shape.rank() - 1;
    if (x != nullptr && x->kind == AxisKind::kSharded && x->dim == last) {
      TrySplit(split, sig.inputs[0][last]);  // row-parallel
    } else {
      TrySplit(split, sig.inputs[1][in[1].shape.rank() - 1]);  // column-parallel
    }
  }
}

void Policy::SplitForZero(AxisSplit& split) {
  const Op& op = split.view.op;
  const std::vector<TensorType>& in = split.view.in;
  const ir::DimSignature& sig = split.view.sig;
  // The parameter this update (of it or of its master copy) or gradient
  // accumulation belongs to: a master is split like its parameter's gradient.
  std::string param = spec_.tensor(op.inputs[0]).name;
  if (op.kind == OpKind::kAccumulate) {
    param = spec_.tensor(op.outputs[0]).name.substr(5);
  } else if (auto of = ir::ParameterOfMaster(spec_, op.inputs[0])) {
    param = spec_.tensor(*of).name;
  }
  auto known = zero_dim_.find(param);
  int z = known == zero_dim_.end() ? -1 : known->second;
  if (z < 0) {
    for (int d = 0; d < in[0].shape.rank(); ++d) {
      bool tp_split = false;
      for (const std::string& l : p_.ops[op.id].split_labels[kTp]) {
        tp_split |= sig.inputs[0][d] == l;
      }
      if (!tp_split && in[0].shape.dim(d) % split.n == 0) {
        z = d;
        break;
      }
    }
  }
  if (z >= 0) {
    TrySplit(split, sig.inputs[0][z]);
    if (!split.labels.empty()) zero_dim_[param] = z;
  } else if (op.kind != OpKind::kAccumulate) {
    p_.zero_whole.push_back(param);
  }
}

void Policy::SplitLikeParameter(AxisSplit& split) const {
  const Op& op = split.view.op;
  const int g = split.g;
  // A master copy's update is split like the parameter it copies.
  if (split.labels.empty() && (op.kind == OpKind::kAdamW || op.kind == OpKind::kSgd)) {
    std::optional<TensorId> param = ir::ParameterOfMaster(spec_, op.inputs[0]);
    if (param.has_value() && !layout_[*param].empty() &&
        layout_[*param][g].kind == AxisKind::kSharded) {
      TrySplit(split, split.view.sig.inputs[0][layout_[*param][g].dim]);
    }
  }
  // A weight gradient lies like its weight: computed on the weight's shard from
  // gathered activations (Megatron-LM's backward), not summed whole from sequence
  // pieces.
  if (split.labels.empty() && op.outputs.size() == 1 && op.info.phase == ir::Phase::kBackward &&
      spec_.tensor(op.outputs[0]).role == ir::TensorRole::kGradient &&
      split.view.out[0].shape.rank() >= 2) {
    if (std::optional<TensorId> w = ParameterOfGradient(spec_, op.outputs[0]);
        w.has_value() && !layout_[*w].empty() && layout_[*w][g].kind == AxisKind::kSharded) {
      TrySplit(split, split.view.sig.outputs[0][layout_[*w][g].dim]);
    }
  }
}

void Policy::FollowShardedInputs(AxisSplit& split) const {
  const Op& op = split.view.op;
  const ir::DimSignature& sig = split.view.sig;
  // Follow the split of an input that arrives sharded: a parameter's first (the
  // backward of a row-parallel linear computes with the weight's shard and
  // gathers the activation gradient, as Megatron-LM does, rather than gathering
  // the weight, which would stay whole on every device through every
  // micro-batch), then the others.
  for (int pass = 0; pass < 2 && split.labels.empty(); ++pass) {
    for (size_t i = 0; i < op.inputs.size() && split.labels.empty(); ++i) {
      if (IsFree(spec_, op.inputs[i]) != (pass == 0)) continue;
      const AxisLayout* a = Produced(op, i, split.g);
      if (a != nullptr && a->kind == AxisKind::kSharded) TrySplit(split, sig.inputs[i][a->dim]);
    }
  }
  // Sequence parallelism between tensor-parallel regions: an op there runs on
  // sequence pieces, so partial sums arriving from a row-parallel linear are
  // reduce-scattered into them (Megatron-LM's sequence parallelism) rather than
  // carried whole through the residual stream, where every micro-batch in
  // flight would keep them whole.
  if (split.g == kTp && s_.sp && split.labels.empty() &&
      op.info.phase != ir::Phase::kOptimizer) {
    for (size_t i = 0; i < op.inputs.size() && split.labels.empty(); ++i) {
      int sd = seq_dim_[op.inputs[i]];
      if (sd >= 0 && !IsFree(spec_, op.inputs[i])) TrySplit(split, sig.inputs[i][sd]);
    }
  }
  // Context parallelism: partial sums over cp arriving with a sequence dim (the key
  // and value gradients of attention, to which every rank's queries contribute) are
  // reduce-scattered into sequence chunks, as Megatron-LM does, rather than reduced
  // whole onto every rank.
  if (split.g == kCp && split.labels.empty() && op.info.phase != ir::Phase::kOptimizer) {
    for (size_t i = 0; i < op.inputs.size() && split.labels.empty(); ++i) {
      const AxisLayout* a = Produced(op, i, split.g);
      const int sd = seq_dim_[op.inputs[i]];
      if (a != nullptr && a->kind == AxisKind::kPartial && sd >= 0) {
        TrySplit(split, sig.inputs[i][sd]);
      }
    }
  }
}

bool Policy::RunsOnPartials(const Op& op, int g) const {
  bool any = false, all = true;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const AxisLayout* a = Produced(op, i, g);
    bool partial =
        a != nullptr && a->kind == AxisKind::kPartial && a->reduce == ir::ReduceOp::kSum;
    any |= partial;
    all &= partial;
  }
  // Never zero-split over dp: a factored plan could not write it, and explicit
  // and factored plans make the same decisions.
  return any && (all || g != kDp);
}

void Policy::DecideAxis(const OpView& view, int g) {
  const Op& op = view.op;
  OpPartition& part = p_.ops[op.id];
  AxisSplit split{view, g, sizes_[g], {}};
  if (g == kTp && op.info.phase != ir::Phase::kOptimizer) SplitTensorParallel(split);
  // Expert parallelism: expert weights ([E, ...] parameters of a batched matmul)
  // are split by expert, which turns the token-to-expert exchange into all-to-alls.
  if (g == kEp && op.kind == OpKind::kMatMul && op.inputs.size() == 2 &&
      IsFree(spec_, op.inputs[1]) && view.in[1].shape.rank() >= 3) {
    TrySplit(split, view.sig.inputs[1][0]);
  }
  // ZeRO shards over the data-parallel replicas and, as Megatron-LM's distributed
  // optimizer does, over the context-parallel ranks inside them (its dp x cp group).
  if ((g == kDp || g == kCp) && s_.zero >= 1 && s_.zero < 3 &&
      (op.kind == OpKind::kAdamW || op.kind == OpKind::kSgd ||
       (s_.zero >= 2 && op.kind == OpKind::kAccumulate && op.info.microbatch < 0 &&
        absl::StartsWith(spec_.tensor(op.outputs[0]).name, "grad.")))) {
    SplitForZero(split);
  } else if (g == kDp && s_.zero >= 3 &&
             (op.kind == OpKind::kAdamW || op.kind == OpKind::kSgd ||
              (op.kind == OpKind::kAccumulate && op.info.microbatch < 0 &&
               absl::StartsWith(spec_.tensor(op.outputs[0]).name, "grad.")))) {
    SplitForZero(split);
  }
  SplitLikeParameter(split);
  FollowShardedInputs(split);
  // Linear ops run on partial sums instead of reducing first.
  if (split.labels.empty() && LinearInAllInputs(spec_, op) && RunsOnPartials(op, g)) {
    part.on_partials[g] = true;
  }
  part.split_labels[g] = split.labels;
}

void Policy::HomeFreeInputs(const Op& op, const OpLayouts& layouts) {
  // A parameter (or optimizer state) lives in the layout its first reader wanted,
  // replicated over data parallelism; later readers (the backward, the update)
  // follow that split instead of gathering it.
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorId t = op.inputs[i];
    if (!IsFree(spec_, t) || !layout_[t].empty()) continue;
    Layout home = layouts.inputs[i];
    for (AxisLayout& a : home) {
      if (a.kind == AxisKind::kPartial) a = AxisLayout{};
    }
    home[kDp] = AxisLayout{};
    if (kEp >= 0 && home[kEp].kind != AxisKind::kSharded) home[kEp] = AxisLayout{};
    layout_[t] = home;
  }
}

void Policy::RecordOutputs(const Op& op, const ir::DimSignature& sig, const OpLayouts& layouts) {
  for (size_t o = 0; o < op.outputs.size(); ++o) {
    layout_[op.outputs[o]] = layouts.outputs[o];
    // The sequence dim follows its label through the op.
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      int sd = seq_dim_[op.inputs[i]];
      if (sd < 0) continue;
      const std::string& l = sig.inputs[i][sd];
      for (size_t d = 0; d < sig.outputs[o].size(); ++d) {
        if (sig.outputs[o][d] == l) seq_dim_[op.outputs[o]] = static_cast<int>(d);
      }
      if (seq_dim_[op.outputs[o]] >= 0) break;
    }
  }
}

absl::Status Policy::Decide(const Op& op) {
  OpView view{op, {}, {}, {}};
  for (TensorId t : op.inputs) view.in.push_back(spec_.tensor(t).type());
  for (TensorId t : op.outputs) view.out.push_back(spec_.tensor(t).type());
  LOOM_ASSIGN_OR_RETURN(view.sig, ir::GetOpSchema(op.kind).signature(view.in, op.attrs));
  OpPartition& part = p_.ops[op.id];
  part.split_labels.assign(sizes_.size(), {});
  part.on_partials.assign(sizes_.size(), false);
  part.recompute = s_.recompute && op.info.layer >= 0;
  // Tensor parallelism is decided first: ZeRO picks a dim the tp split left whole.
  std::vector<int> order = {kTp};
  if (kEp >= 0) order.push_back(kEp);
  if (kCp >= 0) order.push_back(kCp);
  order.push_back(kDp);
  for (int g : order) {
    if (sizes_[g] > 1) DecideAxis(view, g);
  }
  LOOM_ASSIGN_OR_RETURN(OpLayouts layouts, LayoutsOf(spec_, op, p_));
  HomeFreeInputs(op, layouts);
  RecordOutputs(op, view.sig, layouts);
  // ZeRO-3 keeps parameters sharded over dp between uses.
  if (s_.zero >= 3 && (op.kind == OpKind::kAdamW || op.kind == OpKind::kSgd) &&
      !part.split_labels[kDp].empty()) {
    p_.input_layouts[op.inputs[0]] = layouts.inputs[0];
    // An update of a master copy: the parameter (cast from it) lies like it.
    if (auto param = ir::ParameterOfMaster(spec_, op.inputs[0])) {
      p_.input_layouts[*param] = layouts.inputs[0];
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PartitionSpec> Policy::Run() {
  // dp counts every data-parallel replica; with expert parallelism ep of them form
  // the inner ep axis (Megatron's expert-parallel group inside the data-parallel one).
  if (s_.ep > 1) {
    p_.mesh = ir::Mesh({{"dp", s_.dp / s_.ep}, {"pp", s_.pp}, {"ep", s_.ep}, {"tp", s_.tp}});
    p_.grid_axes = {0, 2, 3};
    kDp = 0;
    kEp = 1;
    kTp = 2;
    sizes_ = {s_.dp / s_.ep, s_.ep, s_.tp};
    p_.nest_order = {kEp, kTp, kDp};
  } else if (s_.cp > 1) {
    // Context parallelism: the sequence of every activation in cp contiguous chunks
    // (Megatron-LM's cp group, between tp and dp). An op follows its inputs' split:
    // attention splits its queries, so its keys and values are gathered whole.
    p_.mesh = ir::Mesh({{"dp", s_.dp}, {"pp", s_.pp}, {"cp", s_.cp}, {"tp", s_.tp}});
    p_.grid_axes = {0, 2, 3};
    kDp = 0;
    kCp = 1;
    kTp = 2;
    sizes_ = {s_.dp, s_.cp, s_.tp};
    p_.nest_order = {kTp, kCp, kDp};
  } else {
    p_.mesh = ir::Mesh({{"dp", s_.dp}, {"pp", s_.pp}, {"tp", s_.tp}});
    p_.grid_axes = {0, 2};
    sizes_ = {s_.dp, s_.tp};
    p_.nest_order = {kTp, kDp};
  }
  p_.pp_axis = 1;
  p_.num_virtual_stages = s_.pp * s_.vpp;
  p_.factored = s_.factored;
  p_.input_layouts.assign(spec_.num_tensors(), Layout{});
  p_.output_layouts.assign(spec_.num_tensors(), Layout{});
  layout_.assign(spec_.num_tensors(), Layout{});
  seq_dim_.assign(spec_.num_tensors(), -1);
  for (const ir::Tensor& t : spec_.tensors()) {
    if (t.producer != ir::kNoId || t.role != ir::TensorRole::kInput) continue;
    // Data: batch split over every data-parallel replica, sequence in dim 1.
    Layout l(sizes_.size());
    if (t.shape.rank() >= 1 && s_.dp > 1 && t.shape.dim(0) % s_.dp == 0) {
      if (sizes_[kDp] > 1) l[kDp] = {AxisKind::kSharded, 0};
      if (kEp >= 0) l[kEp] = {AxisKind::kSharded, 0};
    }
    if (kCp >= 0 && t.shape.rank() >= 2 && t.shape.dim(1) % s_.cp == 0) {
      l[kCp] = {AxisKind::kSharded, 1};
    }
    layout_[t.id] = l;
    p_.input_layouts[t.id] = l;
    if (t.shape.rank() >= 2) seq_dim_[t.id] = 1;
  }
  LOOM_RETURN_IF_ERROR(AssignStages());
  for (const Op& op : spec_.ops()) LOOM_RETURN_IF_ERROR(Decide(op));
  // Every replica ends with whole parameters (ZeRO-3 keeps its shards).
  for (TensorId t : spec_.outputs()) {
    if (spec_.tensor(t).role != ir::TensorRole::kParameter || layout_[t].empty()) continue;
    Layout want = layout_[t];
    if (s_.zero < 3) want[kDp] = AxisLayout{};
    for (AxisLayout& a : want) {
      if (a.kind == AxisKind::kPartial) a = AxisLayout{};
    }
    p_.output_layouts[t] = want;
  }
  return std::move(p_);
}

}  // namespace

absl::StatusOr<PartitionSpec> MegatronPolicy(const Graph& spec, const Strategy& strategy) {
  Policy policy(spec, strategy);
  return policy.Run();
}

absl::StatusOr<ir::Plan> Parallelize(const Graph& spec, const Strategy& strategy,
                                     std::vector<std::string>* zero_whole) {
  LOOM_RETURN_IF_ERROR(ValidateStrategy(spec, strategy));
  // Load-balanced context parallelism is planned with a virtual rank per chunk and
  // folded onto the physical ranks (transform/balanced_chunks.h).
  const bool balanced = strategy.cp > 1 && strategy.cp_balanced;
  Strategy planned = strategy;
  if (balanced) planned.cp = 2 * strategy.cp;
  // Each op runs on the devices of one stage: an explicit plan holds about
  // ops x dp x tp tasks, a factored one about (ops / micro-batches) x ep x tp.
  // Refuse what would not fit in memory rather than run out of it.
  constexpr double kMaxTasks = 3e7;
  const double ops = static_cast<double>(spec.num_ops());
  const double width = static_cast<double>(planned.dp) * planned.cp * planned.tp;
  if (!planned.factored && ops * width > kMaxTasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("an explicit plan would hold about ", static_cast<int64_t>(ops * width),
                     " tasks; write it factored (drop --explicit)"));
  }
  const double unit = ops / planned.microbatches * planned.ep * planned.cp * planned.tp;
  if (planned.factored && unit > kMaxTasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan's scale unit would hold about ", static_cast<int64_t>(unit),
        " tasks; use a smaller ep x cp x tp"));
  }
  LOOM_ASSIGN_OR_RETURN(PartitionSpec partition, MegatronPolicy(spec, planned));
  if (zero_whole != nullptr) *zero_whole = partition.zero_whole;
  LOOM_ASSIGN_OR_RETURN(ir::Plan plan, Materialize(spec, partition));
  if (balanced) return FoldBalancedChunks(std::move(plan), strategy.cp);
  return plan;
}

}  // namespace loom::transform
