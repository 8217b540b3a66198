#ifndef LOOM_MODELS_MODELS_H_
#define LOOM_MODELS_MODELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace loom::models {

struct ModelOptions {
  bool tiny = false;   // same structure, small dims (for tests and the interpreter)
  int layers = 0;      // 0: the configuration's layer count
  int64_t batch = 0;   // sequences per micro-batch; 0: 1 (full size) or 2 (tiny)
  int64_t seq = 0;     // tokens per sequence; 0: the configuration's default
  ir::DType dtype = ir::DType::kF32;  // parameters and activations
};

struct ModelInfo {
  std::string name;         // "llama3-8b"
  std::string family;       // "llama3"
  std::string description;  // one line
  double published_params;  // published parameter total (0 when none)
};

// The model zoo in a fixed order.
std::vector<ModelInfo> ListModels();

// One published architecture setting of a zoo model, named as Megatron-LM names its
// argument ("hidden_size", "num_query_groups", "normalization") with the value it
// takes there ("8192", "RMSNorm", "true" for a switch).
struct ArchitectureFact {
  std::string key;
  std::string value;
};

// The full-size architecture Loom builds for a zoo model, in Megatron-LM's words,
// so that a training configuration naming its architecture can be checked against
// it (api/config_settings.h). Only what the model's graph encodes is listed.
// NotFound for an unknown model, as BuildForward.
absl::StatusOr<std::vector<ArchitectureFact>> PublishedArchitecture(absl::string_view name);

// Builds the forward graph of one micro-batch: inputs `tokens` and `targets`
// (i64 [batch, seq]), parameters (role parameter), and one output: the scalar
// cross-entropy loss (role loss), f32 when the dtype is 16-bit (computed on logits
// cast to f32, as Megatron-LM does). Never allocates tensor data. An unknown name is
// NotFound listing the known ones; bad options are InvalidArgument.
absl::StatusOr<ir::Graph> BuildForward(absl::string_view name, const ModelOptions& options);

}  // namespace loom::models

#endif  // LOOM_MODELS_MODELS_H_
