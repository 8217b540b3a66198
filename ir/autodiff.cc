#include "ir/autodiff.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::ir {

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
#define LOOM_OPTIMIZER_PARSE_(e, text) \
  if (name == text) return OptimizerKind::e;
  LOOM_OPTIMIZER_LIST(LOOM_OPTIMIZER_PARSE_)
#undef LOOM_OPTIMIZER_PARSE_
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", name, "'"));
}

absl::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
#define LOOM_OPTIMIZER_NAME_(e, text) \
  case OptimizerKind::e:              \
    return text;
    LOOM_OPTIMIZER_LIST(LOOM_OPTIMIZER_NAME_)
#undef LOOM_OPTIMIZER_NAME_
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
#define LOOM_PRECISION_PARSE_(e, text) \
  if (name == text) return Precision::e;
  LOOM_PRECISION_LIST(LOOM_PRECISION_PARSE_)
#undef LOOM_PRECISION_PARSE_
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (expected ", PrecisionNames(), ")"));
}

absl::string_view PrecisionName(Precision precision) {
  switch (precision) {
#define LOOM_PRECISION_NAME_(e, text) \
  case Precision::e:                  \
    return text;
    LOOM_PRECISION_LIST(LOOM_PRECISION_NAME_)
#undef LOOM_PRECISION_NAME_
  }
  return "?";
}

std::string PrecisionNames() {
  std::string out;
#define LOOM_PRECISION_JOIN_(e, text) absl::StrAppend(&out, out.empty() ? "" : ", ", text);
  LOOM_PRECISION_LIST(LOOM_PRECISION_JOIN_)
#undef LOOM_PRECISION_JOIN_
  return out;
}

DType ModelDType(Precision precision) {
  return precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
}

std::optional<TensorId> ParameterOfMaster(const Graph& step, TensorId t) {
  constexpr absl::string_view kSuffix = ".master";
  if (t < 0 || t >= step.num_tensors()) return std::nullopt;
  const Tensor& master = step.tensor(t);
  if (master.producer != kNoId || master.role != TensorRole::kOptimizerState ||
      !absl::EndsWith(master.name, kSuffix)) {
    return std::nullopt;
  }
  std::optional<TensorId> param =
      step.FindTensor(absl::string_view(master.name).substr(0, master.name.size() - kSuffix.size()));
  if (!param.has_value() || step.tensor(*param).producer != kNoId ||
      step.tensor(*param).role != TensorRole::kParameter) {
    return std::nullopt;
  }
  return param;
}

namespace {

// Emits one op with a unique name for each output and returns its outputs.
absl::StatusOr<std::vector<TensorId>> EmitOp(Graph& graph, OpKind kind,
                                             std::vector<TensorId> inputs, AttrMap attrs,
                                             OpInfo info, absl::string_view name,
                                             TensorRole role) {
  int num_outputs = GetOpArity(kind).num_outputs;
  if (num_outputs < 0) {
    std::vector<TensorType> types;
    for (TensorId in : inputs) types.push_back(graph.tensor(in).type());
    LOOM_ASSIGN_OR_RETURN(auto out_types, InferOutputTypes(kind, types, attrs));
    num_outputs = static_cast<int>(out_types.size());
  }
  std::vector<OutputSpec> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    std::string base = num_outputs == 1 ? std::string(name) : absl::StrCat(name, ".", i);
    outputs.push_back({graph.UniqueName(base), role});
  }
  return graph.AddOp(kind, std::move(inputs), std::move(attrs), info, std::move(outputs));
}

absl::StatusOr<TensorId> EmitOp1(Graph& graph, OpKind kind, std::vector<TensorId> inputs,
                                 AttrMap attrs, OpInfo info, absl::string_view name,
                                 TensorRole role) {
  LOOM_ASSIGN_OR_RETURN(auto outs,
                        EmitOp(graph, kind, std::move(inputs), std::move(attrs), info, name, role));
  LOOM_RET_CHECK(outs.size() == 1);
  return outs[0];
}

// Sums gradient contributions: one is used as is, two are added, more accumulated.
absl::StatusOr<TensorId> SumContributions(Graph& graph, const std::vector<TensorId>& parts,
                                          OpInfo info, absl::string_view name) {
  LOOM_RET_CHECK(!parts.empty());
  if (parts.size() == 1) return parts[0];
  OpKind kind = parts.size() == 2 ? OpKind::kAdd : OpKind::kAccumulate;
  return EmitOp1(graph, kind, parts, {}, info, name, TensorRole::kGradient);
}

class GradBuilderImpl : public GradBuilder {
 public:
  GradBuilderImpl(Graph& graph, OpId op, std::vector<std::optional<TensorId>> grad_outputs)
      : graph_(graph), op_(graph.op(op)), grad_outputs_(std::move(grad_outputs)) {}

  const Graph& graph() const override { return graph_; }
  // A copy: emitting ops grows the graph and would move the original.
  const Op& op() const override { return op_; }
  std::optional<TensorId> grad_output(int i) const override { return grad_outputs_[i]; }

  absl::StatusOr<std::vector<TensorId>> Emit(OpKind kind, std::vector<TensorId> inputs,
                                             AttrMap attrs, absl::string_view name) override {
    OpInfo info = op().info;
    info.phase = Phase::kBackward;
    return EmitOp(graph_, kind, std::move(inputs), std::move(attrs), info, name,
                  TensorRole::kGradient);
  }

 private:
  Graph& graph_;
  Op op_;
  std::vector<std::optional<TensorId>> grad_outputs_;
};

}  // namespace

absl::StatusOr<std::vector<std::optional<TensorId>>> AppendBackward(
    Graph& graph, TensorId loss, absl::Span<const TensorId> wrt) {
  if (loss < 0 || loss >= graph.num_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat("loss tensor id ", loss, " does not exist"));
  }
  const Tensor& loss_tensor = graph.tensor(loss);
  if (loss_tensor.shape.rank() != 0 || !IsFloat(loss_tensor.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("loss '", loss_tensor.name, "' is ",
                                                   loss_tensor.type().ToString(),
                                                   ", expected a float scalar"));
  }
  // The ops the loss depends on, in creation order: only they can carry its
  // gradient. Walked from the loss, so that the backward of one micro-batch costs
  // that micro-batch's ops, not every op the graph holds by then.
  const OpId last_op = loss_tensor.producer;
  std::vector<OpId> ancestors;
  {
    absl::flat_hash_set<OpId> seen;
    std::vector<OpId> stack;
    if (last_op != kNoId) stack.push_back(last_op);
    while (!stack.empty()) {
      const OpId id = stack.back();
      stack.pop_back();
      if (!seen.insert(id).second) continue;
      ancestors.push_back(id);
      for (TensorId in : graph.op(id).inputs) {
        const OpId producer = graph.tensor(in).producer;
        if (producer != kNoId && !seen.contains(producer)) stack.push_back(producer);
      }
    }
    std::sort(ancestors.begin(), ancestors.end());
  }
  // Tensors that depend on some `wrt` tensor: only their gradients are needed.
  absl::flat_hash_set<TensorId> depends;
  for (TensorId w : wrt) depends.insert(w);
  for (OpId id : ancestors) {
    const Op& op = graph.op(id);
    bool any = std::any_of(op.inputs.begin(), op.inputs.end(),
                           [&](TensorId in) { return depends.contains(in); });
    if (any) {
      for (TensorId out : op.outputs) {
        if (IsFloat(graph.tensor(out).dtype)) depends.insert(out);
      }
    }
  }

  absl::flat_hash_map<TensorId, std::vector<TensorId>> contributions;
  OpInfo seed_info;
  seed_info.phase = Phase::kBackward;
  if (last_op != kNoId) seed_info.microbatch = graph.op(last_op).info.microbatch;
  AttrMap seed_attrs;
  seed_attrs.Set("shape", std::vector<int64_t>{});
  seed_attrs.Set("value", 1.0);
  seed_attrs.Set("dtype", std::string(DTypeName(loss_tensor.dtype)));
  LOOM_ASSIGN_OR_RETURN(TensorId seed,
                        EmitOp1(graph, OpKind::kFill, {}, std::move(seed_attrs), seed_info,
                                absl::StrCat("d.", loss_tensor.name), TensorRole::kGradient));
  contributions[loss].push_back(seed);

  for (auto ancestor = ancestors.rbegin(); ancestor != ancestors.rend(); ++ancestor) {
    const OpId id = *ancestor;
    // Copy what we need: emitting ops may reallocate the graph's op vector.
    const Op op = graph.op(id);
    bool has_grad = std::any_of(op.outputs.begin(), op.outputs.end(),
                                [&](TensorId out) { return contributions.contains(out); });
    bool wants_grad = std::any_of(op.inputs.begin(), op.inputs.end(),
                                  [&](TensorId in) { return depends.contains(in); });
    if (!has_grad || !wants_grad) continue;
    const OpSchema& schema = GetOpSchema(op.kind);
    if (schema.grad == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeOp(graph, op),
                                                     ": no gradient rule, but the loss "
                                                     "depends on it"));
    }
    OpInfo info = op.info;
    info.phase = Phase::kBackward;
    std::vector<std::optional<TensorId>> grad_outputs;
    for (TensorId out : op.outputs) {
      auto it = contributions.find(out);
      if (it == contributions.end()) {
        grad_outputs.push_back(std::nullopt);
        continue;
      }
      LOOM_ASSIGN_OR_RETURN(TensorId g,
                            SumContributions(graph, it->second, info,
                                             absl::StrCat("d.", graph.tensor(out).name)));
      grad_outputs.push_back(g);
    }
    GradBuilderImpl builder(graph, id, std::move(grad_outputs));
    auto grads = schema.grad(builder);
    if (!grads.ok()) {
      return absl::Status(grads.status().code(),
                          absl::StrCat(DescribeOp(graph, op), ": gradient rule: ",
                                       grads.status().message()));
    }
    LOOM_RET_CHECK(grads->size() == op.inputs.size())
        << DescribeOp(graph, op) << " gradient rule returned " << grads->size()
        << " gradients";
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const std::optional<TensorId>& g = (*grads)[i];
      if (!g.has_value() || !depends.contains(op.inputs[i])) continue;
      LOOM_RET_CHECK(graph.tensor(*g).shape.SameDims(graph.tensor(op.inputs[i]).shape))
          << DescribeOp(graph, op) << " gradient of input " << i << " is "
          << graph.tensor(*g).type().ToString();
      contributions[op.inputs[i]].push_back(*g);
    }
  }

  std::vector<std::optional<TensorId>> result;
  for (TensorId w : wrt) {
    auto it = contributions.find(w);
    if (it == contributions.end()) {
      result.push_back(std::nullopt);
      continue;
    }
    OpInfo info;
    info.phase = Phase::kBackward;
    info.microbatch = seed_info.microbatch;
    LOOM_ASSIGN_OR_RETURN(TensorId g,
                          SumContributions(graph, it->second, info,
                                           absl::StrCat("d.", graph.tensor(w).name)));
    result.push_back(g);
  }
  return result;
}

namespace {

// Layer of the first forward op reading `param` (-1 if none).
int ParamLayer(const Graph& forward, TensorId param) {
  for (OpId op : forward.consumers(param)) return forward.op(op).info.layer;
  return -1;
}

// A mixed-precision step is built from a bf16 forward graph.
absl::Status CheckBf16Forward(const Graph& forward) {
  for (TensorId id : forward.InputIds()) {
    const Tensor& t = forward.tensor(id);
    if (t.role == TensorRole::kParameter && t.dtype != DType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "precision bf16 needs a bf16 forward graph, but parameter '", t.name, "' of '",
          forward.name(), "' is ", DTypeName(t.dtype), " (build the model with dtype bf16)"));
    }
  }
  return absl::OkStatus();
}

// The optimizer update of parameter `i`: AdamW or SGD on the parameter itself, or,
// with a master copy, on the master followed by a cast back to the parameter's
// dtype. Adds the new values to the graph's outputs (parameter first).
absl::Status AppendUpdate(Graph& g, const TrainingOptions& options, OpInfo info, TensorId param,
                          std::optional<TensorId> master, TensorId grad,
                          std::optional<TensorId> m, std::optional<TensorId> v) {
  const Tensor p = g.tensor(param);  // a copy: adding ops grows the tensor list
  const TensorId updated = master.value_or(param);
  const std::string name = g.tensor(updated).name;
  const TensorRole role = master.has_value() ? TensorRole::kOptimizerState : TensorRole::kParameter;
  std::vector<TensorId> outs;
  if (options.optimizer == OptimizerKind::kSgd) {
    AttrMap attrs{{"lr", options.lr}, {"weight_decay", options.weight_decay}};
    LOOM_ASSIGN_OR_RETURN(outs, g.AddOp(OpKind::kSgd, {updated, grad}, attrs, info,
                                        {{g.UniqueName(name + ".new"), role}}));
  } else {
    LOOM_RET_CHECK(m.has_value() && v.has_value());
    AttrMap attrs{{"lr", options.lr},     {"beta1", options.beta1},
                  {"beta2", options.beta2}, {"eps", options.eps},
                  {"weight_decay", options.weight_decay}, {"step", options.step}};
    LOOM_ASSIGN_OR_RETURN(
        outs, g.AddOp(OpKind::kAdamW, {updated, grad, *m, *v}, attrs, info,
                      {{g.UniqueName(name + ".new"), role},
                       {g.UniqueName(p.name + ".m.new"), TensorRole::kOptimizerState},
                       {g.UniqueName(p.name + ".v.new"), TensorRole::kOptimizerState}}));
  }
  if (master.has_value()) {
    LOOM_ASSIGN_OR_RETURN(
        TensorId cast, EmitOp1(g, OpKind::kCast, {outs[0]},
                               {{"dtype", std::string(DTypeName(p.dtype))}}, info,
                               p.name + ".new", TensorRole::kParameter));
    g.AddOutput(cast);
  }
  for (TensorId out : outs) g.AddOutput(out);
  return absl::OkStatus();
}

// The gradient of each parameter over the step: its micro-batches' gradients
// accumulated, or zeros (f32 in mixed precision) where the loss does not depend on it.
absl::StatusOr<std::vector<TensorId>> AccumulateGradients(
    Graph& g, const Graph& forward, const std::vector<TensorId>& fwd_params,
    const std::vector<TensorId>& params, const std::vector<std::vector<TensorId>>& param_grads,
    bool mixed) {
  std::vector<TensorId> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor p = g.tensor(params[i]);
    OpInfo info{Phase::kBackward, ParamLayer(forward, fwd_params[i]), -1};
    if (param_grads[i].empty()) {
      // The loss does not depend on this parameter: its gradient is zero.
      const DType grad_dtype = mixed ? DType::kF32 : p.dtype;
      AttrMap attrs{{"shape", p.shape.dims()},
                    {"value", 0.0},
                    {"dtype", std::string(DTypeName(grad_dtype))}};
      LOOM_ASSIGN_OR_RETURN(TensorId zero, EmitOp1(g, OpKind::kFill, {}, attrs, info,
                                                   absl::StrCat("grad.", p.name),
                                                   TensorRole::kGradient));
      grads.push_back(zero);
    } else if (param_grads[i].size() == 1) {
      grads.push_back(param_grads[i][0]);
    } else {
      LOOM_ASSIGN_OR_RETURN(TensorId acc,
                            EmitOp1(g, OpKind::kAccumulate, param_grads[i], {}, info,
                                    absl::StrCat("grad.", p.name), TensorRole::kGradient));
      grads.push_back(acc);
    }
  }
  return grads;
}

// Global grad-norm clipping of `grads`. Each layer sums its parameters' squares
// first (tagged with the layer, like Megatron's per-rank local sums), so the total
// reads one value per layer rather than one per parameter.
absl::Status ClipGradients(Graph& g, const Graph& forward, const std::vector<TensorId>& fwd_params,
                           const std::vector<TensorId>& params, double max_grad_norm,
                           std::vector<TensorId>& grads) {
  std::vector<TensorId> squares;  // untagged parameters', then one per layer
  std::map<int, std::vector<TensorId>> by_layer;
  for (size_t i = 0; i < params.size(); ++i) {
    const int layer = ParamLayer(forward, fwd_params[i]);
    OpInfo info{Phase::kOptimizer, layer, -1};
    LOOM_ASSIGN_OR_RETURN(TensorId sq,
                          EmitOp1(g, OpKind::kSumSquares, {grads[i]}, {}, info,
                                  absl::StrCat("grad_sq.", g.tensor(params[i]).name),
                                  TensorRole::kGradient));
    if (layer < 0) {
      squares.push_back(sq);
    } else {
      by_layer[layer].push_back(sq);
    }
  }
  for (const auto& [layer, layer_squares] : by_layer) {
    if (layer_squares.size() == 1) {
      squares.push_back(layer_squares[0]);
      continue;
    }
    OpInfo info{Phase::kOptimizer, layer, -1};
    LOOM_ASSIGN_OR_RETURN(TensorId sum,
                          EmitOp1(g, OpKind::kAccumulate, layer_squares, {}, info,
                                  absl::StrCat("grad_sq.layer.", layer), TensorRole::kGradient));
    squares.push_back(sum);
  }
  OpInfo info{Phase::kOptimizer, -1, -1};
  TensorId total = squares[0];
  if (squares.size() > 1) {
    LOOM_ASSIGN_OR_RETURN(total, EmitOp1(g, OpKind::kAccumulate, squares, {}, info,
                                         "grad_sq.total", TensorRole::kGradient));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId coef,
                        EmitOp1(g, OpKind::kClipCoef, {total},
                                {{"max_norm", max_grad_norm}}, info, "clip_coef",
                                TensorRole::kGradient));
  for (size_t i = 0; i < params.size(); ++i) {
    OpInfo pinfo{Phase::kOptimizer, ParamLayer(forward, fwd_params[i]), -1};
    LOOM_ASSIGN_OR_RETURN(grads[i],
                          EmitOp1(g, OpKind::kMulScalar, {grads[i], coef}, {}, pinfo,
                                  absl::StrCat("grad_clipped.", g.tensor(params[i]).name),
                                  TensorRole::kGradient));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Graph> BuildTrainingStep(const Graph& forward, const TrainingOptions& options) {
  if (options.microbatches < 1 || options.microbatches > kMaxMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat("micro-batches ", options.microbatches,
                                                   " is outside 1..", kMaxMicrobatches));
  }
  if (forward.outputs().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward graph '", forward.name(), "' must have exactly one output (the loss), has ",
        forward.outputs().size()));
  }
  const TensorId fwd_loss = forward.outputs()[0];
  const Tensor& fwd_loss_t = forward.tensor(fwd_loss);
  if (fwd_loss_t.shape.rank() != 0 || !IsFloat(fwd_loss_t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("forward output '", fwd_loss_t.name,
                                                   "' is ", fwd_loss_t.type().ToString(),
                                                   ", expected a float scalar loss"));
  }
  const bool mixed = options.precision == Precision::kBf16;
  if (mixed) LOOM_RETURN_IF_ERROR(CheckBf16Forward(forward));
  const int m_count = options.microbatches;
  Graph g(forward.name());

  // Parameters first, then optimizer states (per parameter: its f32 master in
  // mixed precision, then the AdamW moments), shared by every micro-batch.
  std::vector<TensorId> fwd_params;
  for (TensorId id : forward.InputIds()) {
    if (forward.tensor(id).role == TensorRole::kParameter) fwd_params.push_back(id);
  }
  std::vector<TensorId> params;
  std::vector<std::optional<TensorId>> masters, moments1, moments2;
  absl::flat_hash_map<TensorId, TensorId> shared;  // forward id -> training id
  for (TensorId id : fwd_params) {
    const Tensor& t = forward.tensor(id);
    LOOM_ASSIGN_OR_RETURN(TensorId p, g.AddInput(t.name, t.shape, t.dtype, t.role));
    params.push_back(p);
    shared[id] = p;
  }
  for (TensorId p : params) {
    const Tensor t = g.tensor(p);  // a copy: AddInput grows the tensor list
    const DType state_dtype = mixed ? DType::kF32 : t.dtype;
    std::optional<TensorId> master, m, v;
    if (mixed) {
      LOOM_ASSIGN_OR_RETURN(master, g.AddInput(absl::StrCat(t.name, ".master"), t.shape,
                                               DType::kF32, TensorRole::kOptimizerState));
    }
    if (options.optimizer == OptimizerKind::kAdamW) {
      LOOM_ASSIGN_OR_RETURN(m, g.AddInput(absl::StrCat(t.name, ".m"), t.shape, state_dtype,
                                          TensorRole::kOptimizerState));
      LOOM_ASSIGN_OR_RETURN(v, g.AddInput(absl::StrCat(t.name, ".v"), t.shape, state_dtype,
                                          TensorRole::kOptimizerState));
    }
    masters.push_back(master);
    moments1.push_back(m);
    moments2.push_back(v);
  }

  // Forward and backward of each micro-batch.
  std::vector<std::vector<TensorId>> param_grads(params.size());
  std::vector<TensorId> losses;
  for (int mb = 0; mb < m_count; ++mb) {
    const std::string suffix = m_count > 1 ? absl::StrCat(".mb", mb) : "";
    absl::flat_hash_map<TensorId, TensorId> map = shared;
    for (TensorId id : forward.InputIds()) {
      const Tensor& t = forward.tensor(id);
      if (t.role == TensorRole::kParameter) continue;
      LOOM_ASSIGN_OR_RETURN(map[id], g.AddInput(absl::StrCat(t.name, suffix), t.shape, t.dtype,
                                                t.role));
    }
    for (const Op& op : forward.ops()) {
      std::vector<TensorId> inputs;
      for (TensorId in : op.inputs) inputs.push_back(map.at(in));
      std::vector<OutputSpec> outs;
      for (TensorId out : op.outputs) {
        const Tensor& t = forward.tensor(out);
        outs.push_back({absl::StrCat(t.name, suffix), t.role});
      }
      OpInfo info = op.info;
      info.microbatch = mb;
      LOOM_ASSIGN_OR_RETURN(auto new_outs, g.AddOp(op.kind, inputs, op.attrs, info, outs));
      for (size_t i = 0; i < op.outputs.size(); ++i) map[op.outputs[i]] = new_outs[i];
    }
    TensorId loss = map.at(fwd_loss);
    if (m_count > 1) {
      OpInfo info{Phase::kForward, -1, mb};
      LOOM_ASSIGN_OR_RETURN(
          loss, EmitOp1(g, OpKind::kScale, {loss}, {{"factor", 1.0 / m_count}}, info,
                        absl::StrCat(fwd_loss_t.name, suffix, ".scaled"), TensorRole::kLoss));
    }
    losses.push_back(loss);
    LOOM_ASSIGN_OR_RETURN(auto grads, AppendBackward(g, loss, params));
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i].has_value()) continue;
      TensorId grad = *grads[i];
      if (mixed) {
        // Megatron's main gradient: the bf16 gradient cast to f32 before it is
        // accumulated (and reduced over data parallelism).
        OpInfo info{Phase::kBackward, ParamLayer(forward, fwd_params[i]), mb};
        LOOM_ASSIGN_OR_RETURN(
            grad, EmitOp1(g, OpKind::kCast, {grad}, {{"dtype", std::string(DTypeName(DType::kF32))}},
                          info, absl::StrCat("main_grad.", g.tensor(params[i]).name, suffix),
                          TensorRole::kGradient));
      }
      param_grads[i].push_back(grad);
    }
  }
  TensorId total_loss = losses[0];
  if (m_count > 1) {
    LOOM_ASSIGN_OR_RETURN(total_loss, EmitOp1(g, OpKind::kAccumulate, losses, {},
                                              OpInfo{Phase::kForward, -1, -1},
                                              absl::StrCat(fwd_loss_t.name, ".total"),
                                              TensorRole::kLoss));
  }

  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> grads,
                        AccumulateGradients(g, forward, fwd_params, params, param_grads, mixed));
  if (options.max_grad_norm > 0 && !params.empty()) {
    LOOM_RETURN_IF_ERROR(
        ClipGradients(g, forward, fwd_params, params, options.max_grad_norm, grads));
  }

  // Optimizer update.
  g.AddOutput(total_loss);
  for (size_t i = 0; i < params.size(); ++i) {
    OpInfo info{Phase::kOptimizer, ParamLayer(forward, fwd_params[i]), -1};
    LOOM_RETURN_IF_ERROR(AppendUpdate(g, options, info, params[i], masters[i], grads[i],
                                      moments1[i], moments2[i]));
  }
  return g;
}

}  // namespace loom::ir
