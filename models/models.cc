#include "models/models.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/builder.h"

namespace loom::models {
namespace {

using BuildFn = absl::StatusOr<ir::Graph> (*)(absl::string_view name,
                                              const ModelOptions& options);
using ArchitectureFn = std::vector<ArchitectureFact> (*)(absl::string_view name);

struct ZooEntry {
  const char* name;
  const char* family;
  const char* description;
  double published_params;
  BuildFn build;
  ArchitectureFn architecture;
};

// The zoo, in listing order. Published totals: GPT-2 counted from the released
// checkpoint; Llama 3 from the model cards; DeepSeek from the technical reports
// (V3 without its multi-token-prediction module).
constexpr ZooEntry kZoo[] = {
    {"mlp", "mlp", "residual GELU MLP classifier on token embeddings (8 x 4096/16384)", 0,
     BuildMlp, MlpArchitecture},
    {"gpt2", "gpt2", "GPT-2 124M: learned positions, layernorm, GELU MLP, tied embeddings",
     124439808, BuildGpt2, Gpt2Architecture},
    {"llama3-8b", "llama3", "Llama 3 8B: 32 layers, d 4096, GQA 32/8 heads, SwiGLU 14336",
     8.03e9, BuildLlama3, Llama3Architecture},
    {"llama3-70b", "llama3", "Llama 3 70B: 80 layers, d 8192, GQA 64/8 heads, SwiGLU 28672",
     70.6e9, BuildLlama3, Llama3Architecture},
    {"llama3-405b", "llama3",
     "Llama 3 405B: 126 layers, d 16384, GQA 128/8 heads, SwiGLU 53248", 405.9e9, BuildLlama3,
     Llama3Architecture},
    {"deepseek-v2-lite-16b", "deepseek",
     "DeepSeek-V2-Lite: 27 layers, d 2048, MLA, 2 shared + 64 routed experts (top-6)", 15.7e9,
     BuildDeepSeek, DeepSeekArchitecture},
    {"deepseek-v2-236b", "deepseek",
     "DeepSeek-V2: 60 layers, d 5120, MLA, 2 shared + 160 routed experts (top-6)", 236e9,
     BuildDeepSeek, DeepSeekArchitecture},
    {"deepseek-v3-671b", "deepseek",
     "DeepSeek-V3: 61 layers, d 7168, MLA, 1 shared + 256 routed experts (top-8, sigmoid)",
     671e9, BuildDeepSeek, DeepSeekArchitecture},
};

}  // namespace

std::vector<ModelInfo> ListModels() {
  std::vector<ModelInfo> models;
  for (const ZooEntry& e : kZoo) {
    models.push_back({e.name, e.family, e.description, e.published_params});
  }
  return models;
}

namespace {

absl::Status UnknownModel(absl::string_view name) {
  std::vector<absl::string_view> known;
  for (const ZooEntry& e : kZoo) known.push_back(e.name);
  return absl::NotFoundError(absl::StrCat("unknown model '", name, "' (known: ",
                                          absl::StrJoin(known, ", "), ")"));
}

}  // namespace

absl::StatusOr<ir::Graph> BuildForward(absl::string_view name, const ModelOptions& options) {
  if (options.layers > ir::kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("option 'layers' ", options.layers, " is above ", ir::kMaxLayers));
  }
  for (const ZooEntry& e : kZoo) {
    if (name == e.name) return e.build(name, options);
  }
  return UnknownModel(name);
}

absl::StatusOr<std::vector<ArchitectureFact>> PublishedArchitecture(absl::string_view name) {
  for (const ZooEntry& e : kZoo) {
    if (name == e.name) return e.architecture(name);
  }
  return UnknownModel(name);
}

}  // namespace loom::models
