// Llama 3 (8B, 70B, 405B): pre-norm blocks with RMSNorm, grouped-query attention
// with rotary positions, a SwiGLU MLP, no biases, untied embeddings.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using ir::OpKind;
using ir::TensorId;

struct Llama3Config {
  absl::string_view name;
  int64_t vocab;
  int64_t d;
  int layers;
  int64_t heads;
  int64_t kv_heads;
  int64_t ffn;
  double rope_theta;
  double eps;
  int64_t seq;
};

// Published configurations (Llama Team, "The Llama 3 Herd of Models", 2024, table 3;
// the params.json of Meta-Llama-3.1-{8B,70B,405B}).
constexpr Llama3Config kLlama3[] = {
    {"llama3-8b", /*vocab=*/128256, /*d=*/4096, /*layers=*/32, /*heads=*/32, /*kv_heads=*/8,
     /*ffn=*/14336, /*rope_theta=*/500000.0, /*eps=*/1e-5, /*seq=*/4096},
    {"llama3-70b", /*vocab=*/128256, /*d=*/8192, /*layers=*/80, /*heads=*/64, /*kv_heads=*/8,
     /*ffn=*/28672, /*rope_theta=*/500000.0, /*eps=*/1e-5, /*seq=*/4096},
    {"llama3-405b", /*vocab=*/128256, /*d=*/16384, /*layers=*/126, /*heads=*/128,
     /*kv_heads=*/8, /*ffn=*/53248, /*rope_theta=*/500000.0, /*eps=*/1e-5, /*seq=*/4096},
};

// The same structure at interpreter size (8 query heads sharing 4 kv heads, so that
// tensor parallelism up to 4 applies).
constexpr Llama3Config kLlama3Tiny{"llama3-tiny", /*vocab=*/128, /*d=*/32,  /*layers=*/2,
                                   /*heads=*/8,   /*kv_heads=*/4, /*ffn=*/64,
                                   /*rope_theta=*/500000.0, /*eps=*/1e-5, /*seq=*/8};

// Grouped-query self-attention: q [b,s,H,hd], k and v [b,s,KV,hd], rope on q and k.
absl::StatusOr<TensorId> GqaAttention(GraphBuilder& b, TensorId x, const std::string& p,
                                      const Llama3Config& c, const BuildSize& size) {
  const int64_t hd = c.d / c.heads;
  LOOM_ASSIGN_OR_RETURN(TensorId wq, b.Param(absl::StrCat(p, ".wq"), {c.heads * hd, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId wk, b.Param(absl::StrCat(p, ".wk"), {c.kv_heads * hd, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId wv, b.Param(absl::StrCat(p, ".wv"), {c.kv_heads * hd, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId wo, b.Param(absl::StrCat(p, ".wo"), {c.d, c.heads * hd}));

  LOOM_ASSIGN_OR_RETURN(TensorId q_proj, b.Linear(x, wq, absl::StrCat(p, ".q_proj")));
  LOOM_ASSIGN_OR_RETURN(TensorId k_proj, b.Linear(x, wk, absl::StrCat(p, ".k_proj")));
  LOOM_ASSIGN_OR_RETURN(TensorId v_proj, b.Linear(x, wv, absl::StrCat(p, ".v_proj")));
  LOOM_ASSIGN_OR_RETURN(TensorId q_heads,
                        b.Reshape(q_proj, {size.batch, size.seq, c.heads, hd},
                                  absl::StrCat(p, ".q_heads")));
  LOOM_ASSIGN_OR_RETURN(TensorId k_heads,
                        b.Reshape(k_proj, {size.batch, size.seq, c.kv_heads, hd},
                                  absl::StrCat(p, ".k_heads")));
  LOOM_ASSIGN_OR_RETURN(TensorId v, b.Reshape(v_proj, {size.batch, size.seq, c.kv_heads, hd},
                                              absl::StrCat(p, ".v")));
  LOOM_ASSIGN_OR_RETURN(TensorId q, b.Rope(q_heads, c.rope_theta, absl::StrCat(p, ".q")));
  LOOM_ASSIGN_OR_RETURN(TensorId k, b.Rope(k_heads, c.rope_theta, absl::StrCat(p, ".k")));
  LOOM_ASSIGN_OR_RETURN(TensorId ctx_heads, b.Attention(q, k, v, absl::StrCat(p, ".ctx_heads")));
  LOOM_ASSIGN_OR_RETURN(TensorId ctx, b.Reshape(ctx_heads, {size.batch, size.seq, c.heads * hd},
                                                absl::StrCat(p, ".ctx")));
  return b.Linear(ctx, wo, absl::StrCat(p, ".o"));
}

}  // namespace

std::vector<ArchitectureFact> Llama3Architecture(absl::string_view name) {
  const Llama3Config* c = &kLlama3[0];
  for (const Llama3Config& each : kLlama3) {
    if (each.name == name) c = &each;
  }
  std::vector<ArchitectureFact> facts = {
      {"hidden_size", absl::StrCat(c->d)},
      {"ffn_hidden_size", absl::StrCat(c->ffn)},
      {"num_attention_heads", absl::StrCat(c->heads)},
      {"group_query_attention", "true"},
      {"num_query_groups", absl::StrCat(c->kv_heads)},
      {"kv_channels", absl::StrCat(c->d / c->heads)},
      {"vocab_size", absl::StrCat(c->vocab)}};
  for (ArchitectureFact& f : LlamaStyleFacts(c->eps, c->rope_theta)) facts.push_back(f);
  return facts;
}

absl::StatusOr<ir::Graph> BuildLlama3(absl::string_view name, const ModelOptions& options) {
  const Llama3Config* full = nullptr;
  for (const Llama3Config& c : kLlama3) {
    if (c.name == name) full = &c;
  }
  if (full == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown llama3 configuration '", name, "'"));
  }
  const Llama3Config& c = options.tiny ? kLlama3Tiny : *full;
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
    LOOM_ASSIGN_OR_RETURN(TensorId attn, GqaAttention(b, x1, absl::StrCat(p, ".attn"), c, size));
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, attn, absl::StrCat(p, ".h_mid")));
    LOOM_ASSIGN_OR_RETURN(TensorId g2, b.Param(absl::StrCat(p, ".mlp_norm.gamma"), {c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId x2, b.RmsNorm(h, g2, c.eps, absl::StrCat(p, ".mlp_norm")));
    LOOM_ASSIGN_OR_RETURN(TensorId mlp, SwiGluFfn(b, x2, absl::StrCat(p, ".mlp"), c.d, c.ffn));
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
