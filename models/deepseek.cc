// DeepSeek-V2-Lite, DeepSeek-V2 and DeepSeek-V3: multi-head latent attention (MLA)
// and a mixture of experts (shared plus top-k routed) after the first dense layers.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using ir::OpKind;
using ir::TensorId;

struct DeepSeekConfig {
  absl::string_view name;
  int64_t vocab;
  int64_t d;
  int layers;
  int64_t heads;
  int64_t q_lora_rank;  // 0: q = W_q x, no low-rank query
  int64_t kv_lora_rank;
  int64_t qk_nope_dim;
  int64_t qk_rope_dim;
  int64_t v_dim;
  int64_t ffn;         // intermediate_size of the dense layers
  int64_t moe_ffn;     // moe_intermediate_size of each expert
  int64_t experts;     // n_routed_experts
  int64_t shared;      // n_shared_experts
  int64_t top_k;       // num_experts_per_tok
  int first_dense;     // first_k_dense_replace
  const char* score;   // scoring_func
  bool normalize;      // norm_topk_prob
  double routed_scale;  // routed_scaling_factor
  double rope_theta;
  double eps;
  int64_t seq;
};

// The published config.json of deepseek-ai/DeepSeek-V2-Lite, DeepSeek-V2 and DeepSeek-V3.
constexpr DeepSeekConfig kDeepSeek[] = {
    {"deepseek-v2-lite-16b", /*vocab=*/102400, /*d=*/2048, /*layers=*/27, /*heads=*/16,
     /*q_lora_rank=*/0, /*kv_lora_rank=*/512, /*qk_nope_dim=*/128, /*qk_rope_dim=*/64,
     /*v_dim=*/128, /*ffn=*/10944, /*moe_ffn=*/1408, /*experts=*/64, /*shared=*/2,
     /*top_k=*/6, /*first_dense=*/1, /*score=*/"softmax", /*normalize=*/false,
     /*routed_scale=*/1.0, /*rope_theta=*/10000.0, /*eps=*/1e-6, /*seq=*/4096},
    {"deepseek-v2-236b", /*vocab=*/102400, /*d=*/5120, /*layers=*/60, /*heads=*/128,
     /*q_lora_rank=*/1536, /*kv_lora_rank=*/512, /*qk_nope_dim=*/128, /*qk_rope_dim=*/64,
     /*v_dim=*/128, /*ffn=*/12288, /*moe_ffn=*/1536, /*experts=*/160, /*shared=*/2,
     /*top_k=*/6, /*first_dense=*/1, /*score=*/"softmax", /*normalize=*/false,
     /*routed_scale=*/16.0, /*rope_theta=*/10000.0, /*eps=*/1e-6, /*seq=*/4096},
    {"deepseek-v3-671b", /*vocab=*/129280, /*d=*/7168, /*layers=*/61, /*heads=*/128,
     /*q_lora_rank=*/1536, /*kv_lora_rank=*/512, /*qk_nope_dim=*/128, /*qk_rope_dim=*/64,
     /*v_dim=*/128, /*ffn=*/18432, /*moe_ffn=*/2048, /*experts=*/256, /*shared=*/1,
     /*top_k=*/8, /*first_dense=*/3, /*score=*/"sigmoid", /*normalize=*/true,
     /*routed_scale=*/2.5, /*rope_theta=*/10000.0, /*eps=*/1e-6, /*seq=*/4096},
};

// The interpreter-size version of `full`: every dim small, routing, scoring, shared
// experts, scaling and the presence of a query low-rank kept; one dense layer then MoE.
DeepSeekConfig Tiny(const DeepSeekConfig& full) {
  DeepSeekConfig c = full;
  c.vocab = 128;
  c.d = 32;
  c.layers = 2;
  c.heads = 4;
  c.q_lora_rank = full.q_lora_rank > 0 ? 16 : 0;
  c.kv_lora_rank = 16;
  c.qk_nope_dim = 8;
  c.qk_rope_dim = 4;
  c.v_dim = 8;
  c.ffn = 64;
  c.moe_ffn = 16;
  c.experts = 8;
  c.top_k = 2;
  c.first_dense = 1;
  c.seq = 8;
  return c;
}

// Multi-head latent attention, in the parameter shapes of the released checkpoints.
absl::StatusOr<TensorId> Mla(GraphBuilder& b, TensorId x, const std::string& p,
                             const DeepSeekConfig& c, const BuildSize& size) {
  const int64_t bs = size.batch;
  const int64_t s = size.seq;
  const int64_t H = c.heads;
  const int64_t qk_dim = c.qk_nope_dim + c.qk_rope_dim;

  // Query: W_qb(rmsnorm(W_qa x)), or W_q x without a query low-rank.
  TensorId q_proj;
  if (c.q_lora_rank > 0) {
    LOOM_ASSIGN_OR_RETURN(TensorId wq_a, b.Param(absl::StrCat(p, ".wq_a"), {c.q_lora_rank, c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId gq, b.Param(absl::StrCat(p, ".q_norm.gamma"), {c.q_lora_rank}));
    LOOM_ASSIGN_OR_RETURN(TensorId wq_b,
                          b.Param(absl::StrCat(p, ".wq_b"), {H * qk_dim, c.q_lora_rank}));
    LOOM_ASSIGN_OR_RETURN(TensorId q_a, b.Linear(x, wq_a, absl::StrCat(p, ".q_a")));
    LOOM_ASSIGN_OR_RETURN(TensorId q_a_n, b.RmsNorm(q_a, gq, c.eps, absl::StrCat(p, ".q_norm")));
    LOOM_ASSIGN_OR_RETURN(q_proj, b.Linear(q_a_n, wq_b, absl::StrCat(p, ".q_proj")));
  } else {
    LOOM_ASSIGN_OR_RETURN(TensorId wq, b.Param(absl::StrCat(p, ".wq"), {H * qk_dim, c.d}));
    LOOM_ASSIGN_OR_RETURN(q_proj, b.Linear(x, wq, absl::StrCat(p, ".q_proj")));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId q_heads,
                        b.Reshape(q_proj, {bs, s, H, qk_dim}, absl::StrCat(p, ".q_heads")));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> q_parts,
                        b.Split(q_heads, /*dim=*/3, {c.qk_nope_dim, c.qk_rope_dim},
                                {absl::StrCat(p, ".q_nope"), absl::StrCat(p, ".q_pe")}));
  LOOM_ASSIGN_OR_RETURN(TensorId q_rope,
                        b.Rope(q_parts[1], c.rope_theta, absl::StrCat(p, ".q_rope")));

  // Keys and values: a shared latent c_kv plus one rotary key shared by all heads.
  LOOM_ASSIGN_OR_RETURN(TensorId wkv_a, b.Param(absl::StrCat(p, ".wkv_a"),
                                                {c.kv_lora_rank + c.qk_rope_dim, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId gkv,
                        b.Param(absl::StrCat(p, ".kv_norm.gamma"), {c.kv_lora_rank}));
  LOOM_ASSIGN_OR_RETURN(TensorId wkv_b,
                        b.Param(absl::StrCat(p, ".wkv_b"),
                                {H * (c.qk_nope_dim + c.v_dim), c.kv_lora_rank}));
  LOOM_ASSIGN_OR_RETURN(TensorId kv_a, b.Linear(x, wkv_a, absl::StrCat(p, ".kv_a")));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> kv_a_parts,
                        b.Split(kv_a, /*dim=*/2, {c.kv_lora_rank, c.qk_rope_dim},
                                {absl::StrCat(p, ".c_kv"), absl::StrCat(p, ".k_pe_flat")}));
  LOOM_ASSIGN_OR_RETURN(TensorId c_kv_n,
                        b.RmsNorm(kv_a_parts[0], gkv, c.eps, absl::StrCat(p, ".kv_norm")));
  LOOM_ASSIGN_OR_RETURN(TensorId kv_flat, b.Linear(c_kv_n, wkv_b, absl::StrCat(p, ".kv")));
  LOOM_ASSIGN_OR_RETURN(TensorId kv_heads,
                        b.Reshape(kv_flat, {bs, s, H, c.qk_nope_dim + c.v_dim},
                                  absl::StrCat(p, ".kv_heads")));
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> kv_parts,
                        b.Split(kv_heads, /*dim=*/3, {c.qk_nope_dim, c.v_dim},
                                {absl::StrCat(p, ".k_nope"), absl::StrCat(p, ".v")}));
  LOOM_ASSIGN_OR_RETURN(TensorId k_pe, b.Reshape(kv_a_parts[1], {bs, s, 1, c.qk_rope_dim},
                                                 absl::StrCat(p, ".k_pe")));
  LOOM_ASSIGN_OR_RETURN(TensorId k_rope1,
                        b.Rope(k_pe, c.rope_theta, absl::StrCat(p, ".k_rope1")));
  LOOM_ASSIGN_OR_RETURN(TensorId k_rope,
                        b.Expand(k_rope1, /*dim=*/2, H, absl::StrCat(p, ".k_rope")));

  LOOM_ASSIGN_OR_RETURN(TensorId q, b.Concat({q_parts[0], q_rope}, /*dim=*/3,
                                             absl::StrCat(p, ".q")));
  LOOM_ASSIGN_OR_RETURN(TensorId k, b.Concat({kv_parts[0], k_rope}, /*dim=*/3,
                                             absl::StrCat(p, ".k")));
  LOOM_ASSIGN_OR_RETURN(TensorId ctx_heads,
                        b.Attention(q, k, kv_parts[1], absl::StrCat(p, ".ctx_heads")));
  LOOM_ASSIGN_OR_RETURN(TensorId ctx,
                        b.Reshape(ctx_heads, {bs, s, H * c.v_dim}, absl::StrCat(p, ".ctx")));
  LOOM_ASSIGN_OR_RETURN(TensorId wo, b.Param(absl::StrCat(p, ".wo"), {c.d, H * c.v_dim}));
  return b.Linear(ctx, wo, absl::StrCat(p, ".o"));
}

// Shared experts plus top-k routed experts over the micro-batch's T = batch * seq
// tokens. Routing capacity is per sequence (GShard-style groups): each sequence is one
// group of the routing ops, in which every routed expert holds at most
// ExpertCapacity(seq, k, E) tokens, so a device holding whole sequences routes them
// exactly as the single-device graph does.
absl::StatusOr<TensorId> Moe(GraphBuilder& b, TensorId x, const std::string& p,
                             const DeepSeekConfig& c, const BuildSize& size) {
  const int64_t T = size.batch * size.seq;
  const int64_t E = c.experts;
  const int64_t f = c.moe_ffn;
  LOOM_ASSIGN_OR_RETURN(TensorId router, b.Param(absl::StrCat(p, ".router"), {E, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId w_gate,
                        b.Param(absl::StrCat(p, ".experts.w_gate"), {E, c.d, f}));
  LOOM_ASSIGN_OR_RETURN(TensorId w_up, b.Param(absl::StrCat(p, ".experts.w_up"), {E, c.d, f}));
  LOOM_ASSIGN_OR_RETURN(TensorId w_down,
                        b.Param(absl::StrCat(p, ".experts.w_down"), {E, f, c.d}));

  LOOM_ASSIGN_OR_RETURN(TensorId xt, b.Reshape(x, {T, c.d}, absl::StrCat(p, ".tokens")));
  LOOM_ASSIGN_OR_RETURN(TensorId logits, b.Linear(xt, router, absl::StrCat(p, ".router_logits")));
  ir::AttrMap gate_attrs{{"k", c.top_k},
                         {"score", std::string(c.score)},
                         {"normalize", int64_t{c.normalize ? 1 : 0}}};
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> gate,
                        b.OpN(OpKind::kTopKGate, {logits}, std::move(gate_attrs),
                              {absl::StrCat(p, ".gate_weights"),
                               absl::StrCat(p, ".gate_indices")}));
  const int64_t capacity = ExpertCapacity(size.seq, c.top_k, E);
  LOOM_ASSIGN_OR_RETURN(
      TensorId dispatched,
      b.Op(OpKind::kMoeDispatch, {xt, gate[1]},
           {{"experts", E}, {"capacity", capacity}, {"groups", size.batch}},
           absl::StrCat(p, ".dispatched")));
  LOOM_ASSIGN_OR_RETURN(TensorId g, b.Op(OpKind::kMatMul, {dispatched, w_gate}, {},
                                         absl::StrCat(p, ".experts.gate")));
  LOOM_ASSIGN_OR_RETURN(TensorId u, b.Op(OpKind::kMatMul, {dispatched, w_up}, {},
                                         absl::StrCat(p, ".experts.up")));
  LOOM_ASSIGN_OR_RETURN(TensorId a, b.Op(OpKind::kSwiGlu, {g, u}, {},
                                         absl::StrCat(p, ".experts.act")));
  LOOM_ASSIGN_OR_RETURN(TensorId y, b.Op(OpKind::kMatMul, {a, w_down}, {},
                                         absl::StrCat(p, ".experts.down")));
  LOOM_ASSIGN_OR_RETURN(TensorId routed,
                        b.Op(OpKind::kMoeCombine, {y, gate[0], gate[1]},
                             {{"groups", size.batch}}, absl::StrCat(p, ".routed")));
  if (c.routed_scale != 1.0) {
    LOOM_ASSIGN_OR_RETURN(routed, b.Op(OpKind::kScale, {routed}, {{"factor", c.routed_scale}},
                                       absl::StrCat(p, ".routed_scaled")));
  }
  LOOM_ASSIGN_OR_RETURN(TensorId shared,
                        SwiGluFfn(b, xt, absl::StrCat(p, ".shared"), c.d, c.shared * f));
  LOOM_ASSIGN_OR_RETURN(TensorId sum, b.Add(routed, shared, absl::StrCat(p, ".sum")));
  return b.Reshape(sum, {size.batch, size.seq, c.d}, absl::StrCat(p, ".out"));
}

}  // namespace

std::vector<ArchitectureFact> DeepSeekArchitecture(absl::string_view name) {
  const DeepSeekConfig* c = &kDeepSeek[0];
  for (const DeepSeekConfig& each : kDeepSeek) {
    if (each.name == name) c = &each;
  }
  std::vector<ArchitectureFact> facts = {
      {"hidden_size", absl::StrCat(c->d)},
      {"ffn_hidden_size", absl::StrCat(c->ffn)},
      {"num_attention_heads", absl::StrCat(c->heads)},
      {"vocab_size", absl::StrCat(c->vocab)},
      {"multi_latent_attention", "true"},
      {"kv_lora_rank", absl::StrCat(c->kv_lora_rank)},
      {"qk_head_dim", absl::StrCat(c->qk_nope_dim)},
      {"qk_pos_emb_head_dim", absl::StrCat(c->qk_rope_dim)},
      {"v_head_dim", absl::StrCat(c->v_dim)},
      {"num_experts", absl::StrCat(c->experts)},
      {"moe_router_topk", absl::StrCat(c->top_k)},
      {"moe_ffn_hidden_size", absl::StrCat(c->moe_ffn)},
      {"moe_shared_expert_intermediate_size", absl::StrCat(c->shared * c->moe_ffn)},
      {"moe_router_score_function", c->score},
      {"moe_router_topk_scaling_factor", absl::StrCat(c->routed_scale)}};
  for (ArchitectureFact& f : LlamaStyleFacts(c->eps, c->rope_theta)) facts.push_back(f);
  if (c->q_lora_rank > 0) facts.push_back({"q_lora_rank", absl::StrCat(c->q_lora_rank)});
  return facts;
}

absl::StatusOr<ir::Graph> BuildDeepSeek(absl::string_view name, const ModelOptions& options) {
  const DeepSeekConfig* full = nullptr;
  for (const DeepSeekConfig& c : kDeepSeek) {
    if (c.name == name) full = &c;
  }
  if (full == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown deepseek configuration '", name, "'"));
  }
  const DeepSeekConfig c = options.tiny ? Tiny(*full) : *full;
  LOOM_ASSIGN_OR_RETURN(BuildSize size, ResolveOptions(options, c.layers, c.seq));
  GraphBuilder b{std::string(name), size.dtype};

  LOOM_ASSIGN_OR_RETURN(TensorId tokens, b.TokenInput("tokens", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId targets, b.TokenInput("targets", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId embed, b.Param("embed", {c.vocab, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId h, b.Op(OpKind::kEmbedding, {tokens, embed}, {}, "h.embed"));

  for (int i = 0; i < size.layers; ++i) {
    b.set_layer(i);
    const std::string p = absl::StrCat("layers.", i);
    LOOM_ASSIGN_OR_RETURN(TensorId g1, b.Param(absl::StrCat(p, ".attn_norm.gamma"), {c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId x1, b.RmsNorm(h, g1, c.eps, absl::StrCat(p, ".attn_norm")));
    LOOM_ASSIGN_OR_RETURN(TensorId attn, Mla(b, x1, absl::StrCat(p, ".attn"), c, size));
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, attn, absl::StrCat(p, ".h_mid")));
    LOOM_ASSIGN_OR_RETURN(TensorId g2, b.Param(absl::StrCat(p, ".mlp_norm.gamma"), {c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId x2, b.RmsNorm(h, g2, c.eps, absl::StrCat(p, ".mlp_norm")));
    TensorId mlp;
    if (i < c.first_dense) {
      LOOM_ASSIGN_OR_RETURN(mlp, SwiGluFfn(b, x2, absl::StrCat(p, ".mlp"), c.d, c.ffn));
    } else {
      LOOM_ASSIGN_OR_RETURN(mlp, Moe(b, x2, absl::StrCat(p, ".moe"), c, size));
    }
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, mlp, absl::StrCat(p, ".h")));
  }

  b.set_layer(-1);
  LOOM_ASSIGN_OR_RETURN(TensorId gf, b.Param("norm.gamma", {c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId hf, b.RmsNorm(h, gf, c.eps, "norm"));
  LOOM_ASSIGN_OR_RETURN(TensorId head, b.Param("head.w", {c.vocab, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId logits, b.Linear(hf, head, "logits"));
  LOOM_RETURN_IF_ERROR(b.Loss(logits, targets));
  return std::move(b).Finish();
}

}  // namespace loom::models
