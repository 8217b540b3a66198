// GPT-2 (124M): learned positions, pre-norm blocks with biased layernorms and
// linears, a GELU MLP, and the lm head tied to the token embedding.

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using ir::OpKind;
using ir::TensorId;

struct Gpt2Config {
  int64_t vocab;
  int64_t context;  // rows of the learned position table
  int64_t d;
  int layers;
  int64_t heads;
  int64_t ffn;
  double eps;
  int64_t seq;
};

// Radford et al. 2019, the 124M configuration of openai-community/gpt2.
constexpr Gpt2Config kGpt2{/*vocab=*/50257, /*context=*/1024, /*d=*/768, /*layers=*/12,
                           /*heads=*/12,    /*ffn=*/3072,     /*eps=*/1e-5, /*seq=*/1024};
constexpr Gpt2Config kGpt2Tiny{/*vocab=*/128, /*context=*/16, /*d=*/32, /*layers=*/2,
                               /*heads=*/4,   /*ffn=*/128,    /*eps=*/1e-5, /*seq=*/8};

// Names of a biased linear layer: weight [out, in], bias [out], output.
struct LinearNames {
  std::string w, b, out;
};

absl::StatusOr<TensorId> BiasedLinear(GraphBuilder& b, TensorId x, LinearNames names,
                                      int64_t in, int64_t out) {
  LOOM_ASSIGN_OR_RETURN(TensorId w, b.Param(std::move(names.w), {out, in}));
  LOOM_ASSIGN_OR_RETURN(TensorId bias, b.Param(std::move(names.b), {out}));
  return b.Linear(x, w, bias, std::move(names.out));
}

// layernorm with parameters `<p>.gamma` and `<p>.beta`, both [d].
absl::StatusOr<TensorId> BiasedLayerNorm(GraphBuilder& b, TensorId x, const std::string& p,
                                         int64_t d, double eps) {
  LOOM_ASSIGN_OR_RETURN(TensorId gamma, b.Param(absl::StrCat(p, ".gamma"), {d}));
  LOOM_ASSIGN_OR_RETURN(TensorId beta, b.Param(absl::StrCat(p, ".beta"), {d}));
  return b.LayerNorm(x, gamma, beta, eps, p);
}

// Causal multi-head self-attention with separate biased q, k, v projections.
absl::StatusOr<TensorId> Gpt2Attention(GraphBuilder& b, TensorId x, const std::string& p,
                                       const Gpt2Config& c, const BuildSize& size) {
  const int64_t hd = c.d / c.heads;
  const std::vector<int64_t> heads_shape = {size.batch, size.seq, c.heads, hd};
  std::vector<TensorId> qkv;
  for (const char* which : {"q", "k", "v"}) {
    LOOM_ASSIGN_OR_RETURN(
        TensorId flat,
        BiasedLinear(b, x,
                     {absl::StrCat(p, ".w", which), absl::StrCat(p, ".b", which),
                      absl::StrCat(p, ".", which)},
                     c.d, c.d));
    LOOM_ASSIGN_OR_RETURN(TensorId t,
                          b.Reshape(flat, heads_shape, absl::StrCat(p, ".", which, "_heads")));
    qkv.push_back(t);
  }
  LOOM_ASSIGN_OR_RETURN(TensorId o,
                        b.Attention(qkv[0], qkv[1], qkv[2], absl::StrCat(p, ".ctx_heads")));
  LOOM_ASSIGN_OR_RETURN(TensorId flat,
                        b.Reshape(o, {size.batch, size.seq, c.d}, absl::StrCat(p, ".ctx")));
  return BiasedLinear(b, flat, {absl::StrCat(p, ".wo"), absl::StrCat(p, ".bo"),
                                absl::StrCat(p, ".o")},
                      c.d, c.d);
}

}  // namespace

std::vector<ArchitectureFact> Gpt2Architecture(absl::string_view) {
  const Gpt2Config& c = kGpt2;
  return {{"hidden_size", absl::StrCat(c.d)},
          {"ffn_hidden_size", absl::StrCat(c.ffn)},
          {"num_attention_heads", absl::StrCat(c.heads)},
          {"kv_channels", absl::StrCat(c.d / c.heads)},
          {"vocab_size", absl::StrCat(c.vocab)},
          {"max_position_embeddings", absl::StrCat(c.context)},
          {"normalization", "LayerNorm"},
          {"norm_epsilon", absl::StrCat(c.eps)},
          {"position_embedding_type", "learned_absolute"},
          {"swiglu", "false"},
          {"untie_embeddings_and_output_weights", "false"},
          {"disable_bias_linear", "false"}};
}

absl::StatusOr<ir::Graph> BuildGpt2(absl::string_view name, const ModelOptions& options) {
  const Gpt2Config& c = options.tiny ? kGpt2Tiny : kGpt2;
  LOOM_ASSIGN_OR_RETURN(BuildSize size, ResolveOptions(options, c.layers, c.seq));
  if (size.seq > c.context) {
    return absl::InvalidArgumentError(absl::StrCat("option 'seq' (", size.seq,
                                                   ") exceeds the context length ", c.context,
                                                   " of ", name));
  }
  GraphBuilder b{std::string(name), size.dtype};

  LOOM_ASSIGN_OR_RETURN(TensorId tokens, b.TokenInput("tokens", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId targets, b.TokenInput("targets", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId wte, b.Param("wte", {c.vocab, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId wpe, b.Param("wpe", {c.context, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId tok, b.Op(OpKind::kEmbedding, {tokens, wte}, {}, "h.tok"));
  // Positions 0..seq-1 are the same for every sequence: the first `seq` rows of wpe,
  // broadcast over the batch.
  LOOM_ASSIGN_OR_RETURN(TensorId pos_rows, b.Slice(wpe, /*dim=*/0, /*begin=*/0,
                                                   /*end=*/size.seq, "h.pos_rows"));
  LOOM_ASSIGN_OR_RETURN(TensorId pos_1, b.Reshape(pos_rows, {1, size.seq, c.d}, "h.pos_1"));
  LOOM_ASSIGN_OR_RETURN(TensorId pos, b.Expand(pos_1, /*dim=*/0, size.batch, "h.pos"));
  LOOM_ASSIGN_OR_RETURN(TensorId h, b.Add(tok, pos, "h.embed"));

  for (int i = 0; i < size.layers; ++i) {
    b.set_layer(i);
    const std::string p = absl::StrCat("layers.", i);
    LOOM_ASSIGN_OR_RETURN(TensorId x1, BiasedLayerNorm(b, h, absl::StrCat(p, ".ln1"), c.d,
                                                       c.eps));
    LOOM_ASSIGN_OR_RETURN(TensorId attn, Gpt2Attention(b, x1, absl::StrCat(p, ".attn"), c,
                                                       size));
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, attn, absl::StrCat(p, ".h_mid")));
    LOOM_ASSIGN_OR_RETURN(TensorId x2, BiasedLayerNorm(b, h, absl::StrCat(p, ".ln2"), c.d,
                                                       c.eps));
    LOOM_ASSIGN_OR_RETURN(TensorId up, BiasedLinear(b, x2,
                                                    {absl::StrCat(p, ".mlp.w_fc"),
                                                     absl::StrCat(p, ".mlp.b_fc"),
                                                     absl::StrCat(p, ".mlp.fc")},
                                                    c.d, c.ffn));
    LOOM_ASSIGN_OR_RETURN(TensorId act,
                          b.Op(OpKind::kGelu, {up}, {}, absl::StrCat(p, ".mlp.act")));
    LOOM_ASSIGN_OR_RETURN(TensorId down, BiasedLinear(b, act,
                                                      {absl::StrCat(p, ".mlp.w_proj"),
                                                       absl::StrCat(p, ".mlp.b_proj"),
                                                       absl::StrCat(p, ".mlp.proj")},
                                                      c.ffn, c.d));
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, down, absl::StrCat(p, ".h")));
  }

  b.set_layer(-1);
  LOOM_ASSIGN_OR_RETURN(TensorId hf, BiasedLayerNorm(b, h, "ln_f", c.d, c.eps));
  // Tied embeddings: the head reads the token table itself.
  LOOM_ASSIGN_OR_RETURN(TensorId logits, b.Linear(hf, wte, "logits"));
  LOOM_RETURN_IF_ERROR(b.Loss(logits, targets));
  return std::move(b).Finish();
}

}  // namespace loom::models
