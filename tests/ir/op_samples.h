#ifndef LOOM_TESTS_IR_OP_SAMPLES_H_
#define LOOM_TESTS_IR_OP_SAMPLES_H_

// Random small instances of every op, shared by the gradient, kernel and format
// tests. Each op family contributes a generator in its own samples_<family>.cc.

#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/op_kind.h"

namespace loom::ir::testing {

struct OpSample {
  using FillFn = std::function<void(int i, HostTensor& value, std::mt19937_64& rng)>;

  // Samples are written as brace lists that stop after the last non-default field:
  // {"rank3", OpKind::kSum, {t}, {{"dims", dims}}}.
  OpSample(std::string label, OpKind kind, std::vector<TensorType> inputs, AttrMap attrs = {},
           FillFn fill = nullptr, int64_t int_bound = 2)
      : label(std::move(label)),
        kind(kind),
        inputs(std::move(inputs)),
        attrs(std::move(attrs)),
        fill(std::move(fill)),
        int_bound(int_bound) {}

  std::string label;  // unique within its op kind, e.g. "rank3"
  OpKind kind = OpKind::kAdd;
  std::vector<TensorType> inputs;
  AttrMap attrs;
  // Fills the value of input `i`. Default: floats uniform in [-1, 1], integers
  // uniform in [0, int_bound).
  FillFn fill;
  int64_t int_bound = 2;
};

using SampleGenerator = void (*)(std::mt19937_64& rng, std::vector<OpSample>& out);

void AddElementwiseSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddReduceSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddNormSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddMatMulSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddAttentionSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddShapeSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddMoeSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddOptimizerSamples(std::mt19937_64& rng, std::vector<OpSample>& out);
void AddPointwiseSamples(std::mt19937_64& rng, std::vector<OpSample>& out);

// Every family's samples drawn with one seed, in a fixed order.
std::vector<OpSample> AllSamples(uint64_t seed);

// Values for a sample's inputs (uses `fill` when set).
std::vector<HostTensor> SampleInputs(const OpSample& sample, std::mt19937_64& rng);

// Runs one op on concrete values through a one-op graph and the interpreter.
absl::StatusOr<std::vector<HostTensor>> RunOp(OpKind kind, const std::vector<HostTensor>& inputs,
                                              const AttrMap& attrs = {});

// A random dim in [lo, hi].
int64_t RandomDim(std::mt19937_64& rng, int64_t lo, int64_t hi);
// A float tensor type with the given dims.
TensorType F64(std::vector<int64_t> dims);
TensorType I64(std::vector<int64_t> dims);

}  // namespace loom::ir::testing

#endif  // LOOM_TESTS_IR_OP_SAMPLES_H_
