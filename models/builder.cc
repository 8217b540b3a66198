#include "models/builder.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace loom::models {

using ir::AttrMap;
using ir::OpKind;
using ir::TensorId;

absl::StatusOr<BuildSize> ResolveOptions(const ModelOptions& options, int default_layers,
                                         int64_t default_seq) {
  if (options.layers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option 'layers' must be >= 1 (or 0 for the configuration's count), got ",
        options.layers));
  }
  if (options.batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option 'batch' must be >= 1 (or 0 for the default), got ", options.batch));
  }
  if (options.seq < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option 'seq' must be >= 1 (or 0 for the configuration's length), got ", options.seq));
  }
  if (!ir::IsFloat(options.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("option 'dtype' must be a float type, got ",
                                                   ir::DTypeName(options.dtype)));
  }
  BuildSize size;
  size.tiny = options.tiny;
  size.layers = options.layers > 0 ? options.layers : default_layers;
  size.batch = options.batch > 0 ? options.batch : (options.tiny ? 2 : 1);
  size.seq = options.seq > 0 ? options.seq : default_seq;
  size.dtype = options.dtype;
  return size;
}

int64_t ExpertCapacity(int64_t tokens, int64_t top_k, int64_t experts) {
  // ceil(tokens * top_k * 5 / (experts * 4)) in exact integer arithmetic.
  const int64_t num = tokens * top_k * 5;
  const int64_t den = experts * 4;
  return (num + den - 1) / den;
}

GraphBuilder::GraphBuilder(std::string name, ir::DType dtype)
    : graph_(std::move(name)), dtype_(dtype) {}

absl::StatusOr<TensorId> GraphBuilder::TokenInput(std::string name, int64_t batch,
                                                  int64_t seq) {
  return graph_.AddInput(std::move(name), ir::Shape({batch, seq}, {"b", "s"}), ir::DType::kI64,
                         ir::TensorRole::kInput);
}

absl::StatusOr<TensorId> GraphBuilder::Param(std::string name, std::vector<int64_t> dims) {
  return graph_.AddInput(std::move(name), ir::Shape(std::move(dims)), dtype_,
                         ir::TensorRole::kParameter);
}

absl::StatusOr<std::vector<TensorId>> GraphBuilder::OpN(OpKind kind,
                                                        std::vector<TensorId> inputs,
                                                        AttrMap attrs,
                                                        std::vector<std::string> names) {
  std::vector<ir::OutputSpec> outputs;
  outputs.reserve(names.size());
  for (std::string& n : names) outputs.push_back({std::move(n), ir::TensorRole::kActivation});
  return graph_.AddOp(kind, std::move(inputs), std::move(attrs),
                      ir::OpInfo{ir::Phase::kForward, layer_, /*microbatch=*/-1},
                      std::move(outputs));
}

absl::StatusOr<TensorId> GraphBuilder::Op(OpKind kind, std::vector<TensorId> inputs,
                                          AttrMap attrs, std::string name) {
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                        OpN(kind, std::move(inputs), std::move(attrs), {std::move(name)}));
  return outs[0];
}

absl::StatusOr<TensorId> GraphBuilder::Linear(TensorId x, TensorId w, std::string name) {
  return Op(OpKind::kLinear, {x, w}, {}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Linear(TensorId x, TensorId w, TensorId b,
                                              std::string name) {
  return Op(OpKind::kLinear, {x, w, b}, {}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Add(TensorId a, TensorId b, std::string name) {
  return Op(OpKind::kAdd, {a, b}, {}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Reshape(TensorId x, std::vector<int64_t> dims,
                                               std::string name) {
  return Op(OpKind::kReshape, {x}, {{"shape", std::move(dims)}}, std::move(name));
}

absl::StatusOr<std::vector<TensorId>> GraphBuilder::Split(TensorId x, int64_t dim,
                                                          std::vector<int64_t> sizes,
                                                          std::vector<std::string> names) {
  return OpN(OpKind::kSplit, {x}, {{"dim", dim}, {"sizes", std::move(sizes)}},
             std::move(names));
}

absl::StatusOr<TensorId> GraphBuilder::Concat(std::vector<TensorId> xs, int64_t dim,
                                              std::string name) {
  return Op(OpKind::kConcat, std::move(xs), {{"dim", dim}}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Expand(TensorId x, int64_t dim, int64_t size,
                                              std::string name) {
  return Op(OpKind::kExpand, {x}, {{"dim", dim}, {"size", size}}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Slice(TensorId x, int64_t dim, int64_t begin,
                                             int64_t end, std::string name) {
  return Op(OpKind::kSlice, {x}, {{"dim", dim}, {"begin", begin}, {"end", end}},
            std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::RmsNorm(TensorId x, TensorId gamma, double eps,
                                               std::string name) {
  return Op(OpKind::kRmsNorm, {x, gamma}, {{"eps", eps}}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::LayerNorm(TensorId x, TensorId gamma, TensorId beta,
                                                 double eps, std::string name) {
  return Op(OpKind::kLayerNorm, {x, gamma, beta}, {{"eps", eps}}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Rope(TensorId x, double theta, std::string name) {
  return Op(OpKind::kRope, {x}, {{"theta", theta}}, std::move(name));
}

absl::StatusOr<TensorId> GraphBuilder::Attention(TensorId q, TensorId k, TensorId v,
                                                 std::string name) {
  std::string lse = absl::StrCat(name, ".lse");
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                        OpN(OpKind::kAttention, {q, k, v}, {{"causal", int64_t{1}}},
                            {std::move(name), std::move(lse)}));
  return outs[0];
}

absl::Status GraphBuilder::Loss(TensorId logits, TensorId targets) {
  // Mean token cross-entropy, written out so that the vocabulary can be split across
  // devices: the row maximum (a max-reduction, held constant: the loss does not
  // depend on the shift), the sum of exponentials and the target logit are each
  // reductions over the vocabulary that combine across pieces.
  const std::vector<int64_t> d = dims(logits);
  const int last = static_cast<int>(d.size()) - 1;
  std::vector<int64_t> rows(d.begin(), d.end() - 1);
  std::vector<int64_t> rows1 = rows;
  rows1.push_back(1);
  int64_t positions = 1;
  std::vector<int64_t> all_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    positions *= rows[i];
    all_rows.push_back(static_cast<int64_t>(i));
  }
  // A 16-bit model computes its cross-entropy in f32 on logits cast up (Megatron-LM's
  // default, without --fp16-lm-cross-entropy): the loss is an f32 scalar.
  if (ir::DTypeBytes(dtype_) < ir::DTypeBytes(ir::DType::kF32)) {
    LOOM_ASSIGN_OR_RETURN(logits, Op(OpKind::kCast, {logits},
                                     {{"dtype", std::string(ir::DTypeName(ir::DType::kF32))}},
                                     "loss.logits_f32"));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId max, Op(OpKind::kMax, {logits}, {{"dim", int64_t{last}}},
                                         "loss.row_max"));
  LOOM_ASSIGN_OR_RETURN(TensorId shift, Op(OpKind::kStopGradient, {max}, {}, "loss.shift"));
  LOOM_ASSIGN_OR_RETURN(TensorId shift1, Reshape(shift, rows1, "loss.shift_col"));
  LOOM_ASSIGN_OR_RETURN(TensorId shift_b, Expand(shift1, last, d[last], "loss.shift_rows"));
  LOOM_ASSIGN_OR_RETURN(TensorId z, Op(OpKind::kSub, {logits, shift_b}, {}, "loss.shifted"));
  LOOM_ASSIGN_OR_RETURN(TensorId e, Op(OpKind::kExp, {z}, {}, "loss.exp"));
  LOOM_ASSIGN_OR_RETURN(TensorId se, Op(OpKind::kSum, {e}, {{"dims", std::vector<int64_t>{last}}},
                                        "loss.sum_exp"));
  LOOM_ASSIGN_OR_RETURN(TensorId lse, Op(OpKind::kLog, {se}, {}, "loss.log_sum_exp"));
  LOOM_ASSIGN_OR_RETURN(TensorId picked, Op(OpKind::kPick, {z, targets}, {}, "loss.target"));
  LOOM_ASSIGN_OR_RETURN(TensorId nll, Op(OpKind::kSub, {lse, picked}, {}, "loss.nll"));
  LOOM_ASSIGN_OR_RETURN(TensorId total, Op(OpKind::kSum, {nll}, {{"dims", all_rows}},
                                           "loss.total_nll"));
  LOOM_ASSIGN_OR_RETURN(
      std::vector<TensorId> outs,
      graph_.AddOp(OpKind::kScale, {total},
                   {{"factor", 1.0 / static_cast<double>(positions)}},
                   ir::OpInfo{ir::Phase::kForward, layer_, /*microbatch=*/-1},
                   {{"loss", ir::TensorRole::kLoss}}));
  graph_.AddOutput(outs[0]);
  return absl::OkStatus();
}

std::vector<ArchitectureFact> LlamaStyleFacts(double eps, double rope_theta) {
  // The add_bias_linear and add_qkv_bias switches are off where disable_bias_linear
  // is on (Megatron-LM's spellings of one choice).
  return {{"normalization", "RMSNorm"},
          {"norm_epsilon", absl::StrCat(eps)},
          {"position_embedding_type", "rope"},
          {"rotary_base", absl::StrCat(rope_theta)},
          {"swiglu", "true"},
          {"untie_embeddings_and_output_weights", "true"},
          {"disable_bias_linear", "true"},
          {"add_bias_linear", "false"},
          {"add_qkv_bias", "false"}};
}

absl::StatusOr<TensorId> SwiGluFfn(GraphBuilder& b, TensorId x, absl::string_view prefix,
                                   int64_t d, int64_t ffn) {
  LOOM_ASSIGN_OR_RETURN(TensorId w_gate, b.Param(absl::StrCat(prefix, ".w_gate"), {ffn, d}));
  LOOM_ASSIGN_OR_RETURN(TensorId w_up, b.Param(absl::StrCat(prefix, ".w_up"), {ffn, d}));
  LOOM_ASSIGN_OR_RETURN(TensorId w_down, b.Param(absl::StrCat(prefix, ".w_down"), {d, ffn}));
  LOOM_ASSIGN_OR_RETURN(TensorId gate, b.Linear(x, w_gate, absl::StrCat(prefix, ".gate")));
  LOOM_ASSIGN_OR_RETURN(TensorId up, b.Linear(x, w_up, absl::StrCat(prefix, ".up")));
  LOOM_ASSIGN_OR_RETURN(TensorId act, b.Op(OpKind::kSwiGlu, {gate, up}, {},
                                           absl::StrCat(prefix, ".act")));
  return b.Linear(act, w_down, absl::StrCat(prefix, ".down"));
}

}  // namespace loom::models
