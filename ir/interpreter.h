#ifndef LOOM_IR_INTERPRETER_H_
#define LOOM_IR_INTERPRETER_H_

#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace loom::ir {

struct InterpreterOptions {
  // kF64 computes and stores in double. kF32 computes each op in double and rounds
  // every value it stores to float, as fp32 storage would.
  DType precision = DType::kF64;
};

// Values of every tensor of a graph, by id (nullopt for tensors not computed).
using TensorValues = std::vector<std::optional<HostTensor>>;

// Runs a logical graph on the CPU with the reference kernels. `feeds` must hold a
// value of the right shape for every tensor without producer.
absl::StatusOr<TensorValues> Evaluate(const Graph& graph,
                                      const absl::flat_hash_map<TensorId, HostTensor>& feeds,
                                      const InterpreterOptions& options = {});

// Deterministic feeds for every graph input: parameters and floats uniform in
// [-scale, scale], optimizer states zero except second moments (small positive),
// integer inputs uniform in [0, int_bound) where int_bound is the tensor's
// `vocab`-like bound given by `int_bounds` (by tensor name) or 2 by default. A
// mixed-precision master copy (ParameterOfMaster) is fed its parameter's values.
absl::flat_hash_map<TensorId, HostTensor> RandomFeeds(
    const Graph& graph, uint64_t seed, double scale = 0.5,
    const absl::flat_hash_map<std::string, int64_t>& int_bounds = {});

}  // namespace loom::ir

#endif  // LOOM_IR_INTERPRETER_H_
