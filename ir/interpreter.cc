#include "ir/interpreter.h"

#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::ir {

absl::StatusOr<TensorValues> Evaluate(const Graph& graph,
                                      const absl::flat_hash_map<TensorId, HostTensor>& feeds,
                                      const InterpreterOptions& options) {
  TensorValues values(graph.num_tensors());
  const bool round_f32 = options.precision == DType::kF32;
  for (TensorId id : graph.InputIds()) {
    const Tensor& t = graph.tensor(id);
    auto it = feeds.find(id);
    if (it == feeds.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no value fed for input '", t.name, "'"));
    }
    if (!it->second.shape.SameDims(t.shape) ||
        it->second.size() != t.shape.num_elements()) {
      return absl::InvalidArgumentError(absl::StrCat("value fed for '", t.name, "' has shape ",
                                                     it->second.shape.ToString(),
                                                     ", expected ", t.shape.ToString()));
    }
    HostTensor v = it->second;
    v.dtype = t.dtype;
    if (round_f32 && IsFloat(t.dtype)) {
      for (double& x : v.data) x = static_cast<float>(x);
    }
    values[id] = std::move(v);
  }
  for (const Op& op : graph.ops()) {
    std::vector<const HostTensor*> in;
    for (TensorId id : op.inputs) {
      LOOM_RET_CHECK(values[id].has_value()) << DescribeOp(graph, op);
      in.push_back(&*values[id]);
    }
    std::vector<HostTensor> out;
    for (TensorId id : op.outputs) {
      const Tensor& t = graph.tensor(id);
      out.emplace_back(t.shape, t.dtype);
    }
    absl::Status s = GetOpSchema(op.kind).kernel(in, op.attrs, absl::MakeSpan(out));
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(DescribeOp(graph, op), ": ", s.message()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (round_f32 && IsFloat(out[i].dtype)) {
        for (double& x : out[i].data) x = static_cast<float>(x);
      }
      values[op.outputs[i]] = std::move(out[i]);
    }
  }
  return values;
}

absl::flat_hash_map<TensorId, HostTensor> RandomFeeds(
    const Graph& graph, uint64_t seed, double scale,
    const absl::flat_hash_map<std::string, int64_t>& int_bounds) {
  std::mt19937_64 rng(seed);
  absl::flat_hash_map<TensorId, HostTensor> feeds;
  for (TensorId id : graph.InputIds()) {
    const Tensor& t = graph.tensor(id);
    HostTensor v(t.shape, t.dtype);
    if (!IsFloat(t.dtype)) {
      auto it = int_bounds.find(t.name);
      int64_t bound = it == int_bounds.end() ? 2 : it->second;
      std::uniform_int_distribution<int64_t> dist(0, bound - 1);
      for (double& x : v.data) x = static_cast<double>(dist(rng));
    } else if (t.role == TensorRole::kOptimizerState) {
      std::uniform_real_distribution<double> dist(0.0, scale * 0.01);
      for (double& x : v.data) x = dist(rng);
    } else {
      std::uniform_real_distribution<double> dist(-scale, scale);
      for (double& x : v.data) x = dist(rng);
    }
    feeds[id] = std::move(v);
  }
  // A mixed-precision master copy starts equal to its parameter.
  for (TensorId id : graph.InputIds()) {
    if (std::optional<TensorId> param = ParameterOfMaster(graph, id)) {
      HostTensor copy = feeds[*param];
      copy.dtype = graph.tensor(id).dtype;
      feeds[id] = std::move(copy);
    }
  }
  return feeds;
}

}  // namespace loom::ir
