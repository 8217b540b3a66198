#ifndef LOOM_TESTS_IR_OP_TEST_UTIL_H_
#define LOOM_TESTS_IR_OP_TEST_UTIL_H_

// Helpers shared by the per-family op tests (tests/ir/ops_*_test.cc): literal and
// random tensors, one-output runs, shape-inference errors, partition signatures, and
// one op's gradient rule applied on a one-op graph.

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/op_kind.h"
#include "ir/op_schema.h"

namespace loom::ir::testing {

// A tensor with the given dims holding `values` in row-major order.
HostTensor Make(std::vector<int64_t> dims, std::vector<double> values, DType dtype = DType::kF64);

// An f64 tensor with values uniform in [-1, 1].
HostTensor RandomTensor(const Shape& shape, std::mt19937_64& rng);

// Sum of a[i] * b[i] (expects equal sizes).
double Dot(const HostTensor& a, const HostTensor& b);

// Central differences of the scalar function f at x.
HostTensor NumericGradient(const std::function<double(const HostTensor&)>& f, HostTensor x);

// Element-wise EXPECT_NEAR. The first form asserts equal dims, the second equal sizes.
void ExpectNear(const HostTensor& got, const HostTensor& want, double tol = 1e-12);
void ExpectNear(const HostTensor& got, const std::vector<double>& want, double tol = 1e-12);

// Runs `kind` on `inputs` and returns its only output (failing the test otherwise).
HostTensor Run1(OpKind kind, const std::vector<HostTensor>& inputs, const AttrMap& attrs);

// The status of shape inference for `kind` on `in`.
absl::Status InferError(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs);

// The partition signature of `kind` on `in`, printed ("" and a test failure on error).
std::string Signature(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs);

// Emits gradient ops into a graph that holds the forward op: phase backward, the
// forward op's layer and micro-batch, outputs with role gradient.
class TestGradBuilder : public GradBuilder {
 public:
  TestGradBuilder(Graph& graph, OpId op, std::vector<std::optional<TensorId>> grad_outputs);

  const Graph& graph() const override { return graph_; }
  // A copy: emitting ops grows the graph's op vector and would move the original.
  const Op& op() const override { return op_; }
  std::optional<TensorId> grad_output(int i) const override { return grad_outputs_[i]; }

  absl::StatusOr<std::vector<TensorId>> Emit(OpKind kind, std::vector<TensorId> inputs,
                                             AttrMap attrs, absl::string_view name) override;

 private:
  Graph& graph_;
  Op op_;
  std::vector<std::optional<TensorId>> grad_outputs_;
};

// The result of applying an op's gradient rule to concrete values.
struct GradResult {
  Graph graph;
  std::vector<std::optional<HostTensor>> grads;  // per op input
};

// Builds `kind` over `inputs`, applies its gradient rule with `dys` as the output
// gradients (nullopt: the output has none) and evaluates the gradients.
absl::StatusOr<GradResult> ApplyGradRule(OpKind kind, const std::vector<HostTensor>& inputs,
                                         const AttrMap& attrs,
                                         const std::vector<std::optional<HostTensor>>& dys);

}  // namespace loom::ir::testing

#endif  // LOOM_TESTS_IR_OP_TEST_UTIL_H_
