#include "tests/ir/op_samples.h"

#include "absl/strings/str_cat.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"

namespace loom::ir::testing {

std::vector<OpSample> AllSamples(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<OpSample> out;
  for (SampleGenerator gen :
       {AddElementwiseSamples, AddReduceSamples, AddNormSamples, AddMatMulSamples,
        AddAttentionSamples, AddShapeSamples, AddMoeSamples, AddOptimizerSamples,
        AddPointwiseSamples}) {
    gen(rng, out);
  }
  return out;
}

std::vector<HostTensor> SampleInputs(const OpSample& sample, std::mt19937_64& rng) {
  std::vector<HostTensor> values;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    const TensorType& t = sample.inputs[i];
    HostTensor v(t.shape, t.dtype);
    if (sample.fill) {
      sample.fill(static_cast<int>(i), v, rng);
    } else if (IsFloat(t.dtype)) {
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      for (double& x : v.data) x = dist(rng);
    } else {
      std::uniform_int_distribution<int64_t> dist(0, sample.int_bound - 1);
      for (double& x : v.data) x = static_cast<double>(dist(rng));
    }
    values.push_back(std::move(v));
  }
  return values;
}

absl::StatusOr<std::vector<HostTensor>> RunOp(OpKind kind, const std::vector<HostTensor>& inputs,
                                              const AttrMap& attrs) {
  Graph graph("run_op");
  absl::flat_hash_map<TensorId, HostTensor> feeds;
  std::vector<TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId id, graph.AddInput(absl::StrCat("in", i), inputs[i].shape,
                                                      inputs[i].dtype, TensorRole::kInput));
    ids.push_back(id);
    feeds[id] = inputs[i];
  }
  int num_outputs = GetOpArity(kind).num_outputs;
  if (num_outputs < 0) {
    // Ops whose output count comes from attributes: ask shape inference.
    std::vector<TensorType> types;
    for (const HostTensor& v : inputs) types.push_back({v.shape, v.dtype});
    LOOM_ASSIGN_OR_RETURN(auto out_types, InferOutputTypes(kind, types, attrs));
    num_outputs = static_cast<int>(out_types.size());
  }
  std::vector<OutputSpec> outs;
  for (int i = 0; i < num_outputs; ++i) outs.push_back({absl::StrCat("out", i)});
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> out_ids,
                        graph.AddOp(kind, ids, attrs, OpInfo{}, outs));
  LOOM_ASSIGN_OR_RETURN(TensorValues values, Evaluate(graph, feeds));
  std::vector<HostTensor> result;
  for (TensorId id : out_ids) result.push_back(*values[id]);
  return result;
}

int64_t RandomDim(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

TensorType F64(std::vector<int64_t> dims) { return TensorType{Shape(std::move(dims)), DType::kF64}; }
TensorType I64(std::vector<int64_t> dims) { return TensorType{Shape(std::move(dims)), DType::kI64}; }

}  // namespace loom::ir::testing
