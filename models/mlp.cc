// A plain MLP classifier on token embeddings: the smallest model of the zoo, a
// stack of identical residual two-layer blocks that pipelines split evenly.

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using ir::OpKind;
using ir::TensorId;

struct MlpConfig {
  int64_t vocab;
  int64_t d;
  int64_t ffn;
  int layers;
  int64_t seq;
};

constexpr MlpConfig kMlp{/*vocab=*/32000, /*d=*/4096, /*ffn=*/16384, /*layers=*/8,
                         /*seq=*/1024};
constexpr MlpConfig kMlpTiny{/*vocab=*/128, /*d=*/32, /*ffn=*/64, /*layers=*/2, /*seq=*/8};

}  // namespace

std::vector<ArchitectureFact> MlpArchitecture(absl::string_view) { return {}; }

absl::StatusOr<ir::Graph> BuildMlp(absl::string_view name, const ModelOptions& options) {
  const MlpConfig& c = options.tiny ? kMlpTiny : kMlp;
  LOOM_ASSIGN_OR_RETURN(BuildSize size, ResolveOptions(options, c.layers, c.seq));
  GraphBuilder b{std::string(name), size.dtype};

  LOOM_ASSIGN_OR_RETURN(TensorId tokens, b.TokenInput("tokens", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId targets, b.TokenInput("targets", size.batch, size.seq));
  LOOM_ASSIGN_OR_RETURN(TensorId embed, b.Param("embed", {c.vocab, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId h, b.Op(OpKind::kEmbedding, {tokens, embed}, {}, "h.embed"));

  for (int i = 0; i < size.layers; ++i) {
    b.set_layer(i);
    const std::string p = absl::StrCat("layers.", i);
    LOOM_ASSIGN_OR_RETURN(TensorId w1, b.Param(absl::StrCat(p, ".fc1.w"), {c.ffn, c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId b1, b.Param(absl::StrCat(p, ".fc1.b"), {c.ffn}));
    LOOM_ASSIGN_OR_RETURN(TensorId w2, b.Param(absl::StrCat(p, ".fc2.w"), {c.d, c.ffn}));
    LOOM_ASSIGN_OR_RETURN(TensorId b2, b.Param(absl::StrCat(p, ".fc2.b"), {c.d}));
    LOOM_ASSIGN_OR_RETURN(TensorId up, b.Linear(h, w1, b1, absl::StrCat(p, ".fc1")));
    LOOM_ASSIGN_OR_RETURN(TensorId act, b.Op(OpKind::kGelu, {up}, {}, absl::StrCat(p, ".act")));
    LOOM_ASSIGN_OR_RETURN(TensorId down, b.Linear(act, w2, b2, absl::StrCat(p, ".fc2")));
    LOOM_ASSIGN_OR_RETURN(h, b.Add(h, down, absl::StrCat(p, ".out")));
  }

  b.set_layer(-1);
  LOOM_ASSIGN_OR_RETURN(TensorId head_w, b.Param("head.w", {c.vocab, c.d}));
  LOOM_ASSIGN_OR_RETURN(TensorId head_b, b.Param("head.b", {c.vocab}));
  LOOM_ASSIGN_OR_RETURN(TensorId logits, b.Linear(h, head_w, head_b, "logits"));
  LOOM_RETURN_IF_ERROR(b.Loss(logits, targets));
  return std::move(b).Finish();
}

}  // namespace loom::models
