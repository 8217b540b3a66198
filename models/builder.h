#ifndef LOOM_MODELS_BUILDER_H_
#define LOOM_MODELS_BUILDER_H_

// Shared machinery of the model builders: resolved options, a thin graph builder
// that tags every op with its block, and the blocks several families share.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/op_kind.h"
#include "models/models.h"

namespace loom::models {

// ModelOptions with every default filled in.
struct BuildSize {
  bool tiny = false;
  int layers = 0;
  int64_t batch = 0;
  int64_t seq = 0;
  ir::DType dtype = ir::DType::kF32;
};

// Checks `options` (each bad field is InvalidArgument naming the option) and fills
// its defaults: the configuration's layer count and sequence length, batch 1 at full
// size and 2 at tiny size.
absl::StatusOr<BuildSize> ResolveOptions(const ModelOptions& options, int default_layers,
                                         int64_t default_seq);

// Expert capacity of one token group: ceil(tokens * top_k / experts * 1.25).
int64_t ExpertCapacity(int64_t tokens, int64_t top_k, int64_t experts);

// Builds one forward graph. Every op gets OpInfo{kForward, layer(), -1}; every op
// output is an activation except the loss. Errors from shape inference pass through
// with the op and its inputs named.
class GraphBuilder {
 public:
  GraphBuilder(std::string name, ir::DType dtype);

  // Block index tagged on the ops added next (-1: embedding and head).
  void set_layer(int layer) { layer_ = layer; }
  int layer() const { return layer_; }
  ir::DType dtype() const { return dtype_; }
  const ir::Graph& graph() const { return graph_; }
  const std::vector<int64_t>& dims(ir::TensorId id) const {
    return graph_.tensor(id).shape.dims();
  }

  // Integer data input `name` of shape [batch, seq] with dims named b and s.
  absl::StatusOr<ir::TensorId> TokenInput(std::string name, int64_t batch, int64_t seq);
  // Trainable parameter in the model dtype.
  absl::StatusOr<ir::TensorId> Param(std::string name, std::vector<int64_t> dims);

  // Appends an op with one output, named `name`.
  absl::StatusOr<ir::TensorId> Op(ir::OpKind kind, std::vector<ir::TensorId> inputs,
                                  ir::AttrMap attrs, std::string name);
  // Appends an op with one output per name.
  absl::StatusOr<std::vector<ir::TensorId>> OpN(ir::OpKind kind,
                                                std::vector<ir::TensorId> inputs,
                                                ir::AttrMap attrs,
                                                std::vector<std::string> names);

  // linear(x, w) or linear(x, w, b).
  absl::StatusOr<ir::TensorId> Linear(ir::TensorId x, ir::TensorId w, std::string name);
  absl::StatusOr<ir::TensorId> Linear(ir::TensorId x, ir::TensorId w, ir::TensorId b,
                                      std::string name);
  absl::StatusOr<ir::TensorId> Add(ir::TensorId a, ir::TensorId b, std::string name);
  absl::StatusOr<ir::TensorId> Reshape(ir::TensorId x, std::vector<int64_t> dims,
                                       std::string name);
  absl::StatusOr<std::vector<ir::TensorId>> Split(ir::TensorId x, int64_t dim,
                                                  std::vector<int64_t> sizes,
                                                  std::vector<std::string> names);
  absl::StatusOr<ir::TensorId> Concat(std::vector<ir::TensorId> xs, int64_t dim,
                                      std::string name);
  // Broadcasts size-1 dim `dim` to `size`.
  absl::StatusOr<ir::TensorId> Expand(ir::TensorId x, int64_t dim, int64_t size,
                                      std::string name);
  // Elements [begin, end) of dim `dim`.
  absl::StatusOr<ir::TensorId> Slice(ir::TensorId x, int64_t dim, int64_t begin, int64_t end,
                                     std::string name);
  absl::StatusOr<ir::TensorId> RmsNorm(ir::TensorId x, ir::TensorId gamma, double eps,
                                       std::string name);
  absl::StatusOr<ir::TensorId> LayerNorm(ir::TensorId x, ir::TensorId gamma,
                                         ir::TensorId beta, double eps, std::string name);
  absl::StatusOr<ir::TensorId> Rope(ir::TensorId x, double theta, std::string name);
  // Causal attention over q [b,s,hq,dk], k [b,s,hkv,dk], v [b,s,hkv,dv].
  absl::StatusOr<ir::TensorId> Attention(ir::TensorId q, ir::TensorId k, ir::TensorId v,
                                         std::string name);

  // The mean token cross-entropy of logits [..., V] against targets [...], written
  // with vocabulary reductions (max, sum of exponentials, target pick) so that the
  // vocabulary can be split; the graph's one output, named "loss". A model in a
  // 16-bit dtype casts the logits to f32 first ("loss.logits_f32"): its loss is f32.
  absl::Status Loss(ir::TensorId logits, ir::TensorId targets);

  ir::Graph Finish() && { return std::move(graph_); }

 private:
  ir::Graph graph_;
  ir::DType dtype_;
  int layer_ = -1;
};

// ---- blocks shared by several families ----------------------------------------

// Parameters `<prefix>.w_gate` [ffn, d], `<prefix>.w_up` [ffn, d], `<prefix>.w_down`
// [d, ffn] and w_down(swiglu(w_gate x, w_up x)). x is [..., d].
absl::StatusOr<ir::TensorId> SwiGluFfn(GraphBuilder& b, ir::TensorId x,
                                       absl::string_view prefix, int64_t d, int64_t ffn);

// ---- the families (models/mlp.cc, gpt.cc, llama.cc, deepseek.cc) --------------

absl::StatusOr<ir::Graph> BuildMlp(absl::string_view name, const ModelOptions& options);
absl::StatusOr<ir::Graph> BuildGpt2(absl::string_view name, const ModelOptions& options);
absl::StatusOr<ir::Graph> BuildLlama3(absl::string_view name, const ModelOptions& options);
absl::StatusOr<ir::Graph> BuildDeepSeek(absl::string_view name, const ModelOptions& options);

// The architecture settings the Llama-style families share (models.h,
// PublishedArchitecture): RMSNorm with `eps`, rotary positions with base
// `rope_theta`, SwiGLU MLPs, untied embeddings, no biases.
std::vector<ArchitectureFact> LlamaStyleFacts(double eps, double rope_theta);

// Their full-size architectures (models.h, PublishedArchitecture); `name` is known
// to the family.
std::vector<ArchitectureFact> MlpArchitecture(absl::string_view name);
std::vector<ArchitectureFact> Gpt2Architecture(absl::string_view name);
std::vector<ArchitectureFact> Llama3Architecture(absl::string_view name);
std::vector<ArchitectureFact> DeepSeekArchitecture(absl::string_view name);

}  // namespace loom::models

#endif  // LOOM_MODELS_BUILDER_H_
