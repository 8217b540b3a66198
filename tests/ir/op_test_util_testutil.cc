#include "tests/ir/op_test_util.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/status_macros.h"
#include "tests/ir/op_samples.h"

namespace loom::ir::testing {

HostTensor Make(std::vector<int64_t> dims, std::vector<double> values, DType dtype) {
  HostTensor t(Shape(std::move(dims)), dtype);
  t.data = std::move(values);
  return t;
}

HostTensor RandomTensor(const Shape& shape, std::mt19937_64& rng) {
  HostTensor t(shape, DType::kF64);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (double& x : t.data) x = dist(rng);
  return t;
}

double Dot(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0.0;
  for (int64_t i = 0; i < a.size() && i < b.size(); ++i) sum += a[i] * b[i];
  return sum;
}

HostTensor NumericGradient(const std::function<double(const HostTensor&)>& f, HostTensor x) {
  constexpr double kStep = 1e-6;
  HostTensor g(x.shape, x.dtype);
  for (int64_t e = 0; e < x.size(); ++e) {
    const double saved = x[e];
    x[e] = saved + kStep;
    const double up = f(x);
    x[e] = saved - kStep;
    const double down = f(x);
    x[e] = saved;
    g[e] = (up - down) / (2 * kStep);
  }
  return g;
}

void ExpectNear(const HostTensor& got, const HostTensor& want, double tol) {
  ASSERT_TRUE(got.shape.SameDims(want.shape))
      << got.shape.ToString() << " vs " << want.shape.ToString();
  for (int64_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

void ExpectNear(const HostTensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

HostTensor Run1(OpKind kind, const std::vector<HostTensor>& inputs, const AttrMap& attrs) {
  auto out = RunOp(kind, inputs, attrs);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->size() != 1) return HostTensor();
  return (*out)[0];
}

absl::Status InferError(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs) {
  return InferOutputTypes(kind, in, attrs).status();
}

std::string Signature(OpKind kind, std::vector<TensorType> in, const AttrMap& attrs) {
  auto sig = GetOpSchema(kind).signature(in, attrs);
  EXPECT_TRUE(sig.ok()) << sig.status();
  return sig.ok() ? sig->ToString() : "";
}

TestGradBuilder::TestGradBuilder(Graph& graph, OpId op,
                                 std::vector<std::optional<TensorId>> grad_outputs)
    : graph_(graph), op_(graph.op(op)), grad_outputs_(std::move(grad_outputs)) {}

absl::StatusOr<std::vector<TensorId>> TestGradBuilder::Emit(OpKind kind,
                                                            std::vector<TensorId> inputs,
                                                            AttrMap attrs, absl::string_view name) {
  std::vector<TensorType> types;
  for (TensorId id : inputs) types.push_back(graph_.tensor(id).type());
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorType> out, InferOutputTypes(kind, types, attrs));
  std::vector<OutputSpec> specs;
  for (size_t i = 0; i < out.size(); ++i) {
    std::string base = out.size() == 1 ? std::string(name) : absl::StrCat(name, ".", i);
    specs.push_back({graph_.UniqueName(base), TensorRole::kGradient});
  }
  OpInfo info = op_.info;
  info.phase = Phase::kBackward;
  return graph_.AddOp(kind, std::move(inputs), std::move(attrs), info, std::move(specs));
}

absl::StatusOr<GradResult> ApplyGradRule(OpKind kind, const std::vector<HostTensor>& inputs,
                                         const AttrMap& attrs,
                                         const std::vector<std::optional<HostTensor>>& dys) {
  GradResult r{Graph("grad_rule"), {}};
  absl::flat_hash_map<TensorId, HostTensor> feeds;
  std::vector<TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId id, r.graph.AddInput(absl::StrCat("x", i), inputs[i].shape,
                                                        inputs[i].dtype, TensorRole::kInput));
    ids.push_back(id);
    feeds[id] = inputs[i];
  }
  std::vector<OutputSpec> specs;
  for (size_t i = 0; i < dys.size(); ++i) specs.push_back({absl::StrCat("y", i)});
  LOOM_ASSIGN_OR_RETURN(std::vector<TensorId> outs,
                        r.graph.AddOp(kind, ids, attrs, OpInfo{}, specs));
  std::vector<std::optional<TensorId>> dy_ids;
  for (size_t i = 0; i < dys.size(); ++i) {
    if (!dys[i].has_value()) {
      dy_ids.push_back(std::nullopt);
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(TensorId id, r.graph.AddInput(absl::StrCat("dy", i), dys[i]->shape,
                                                        dys[i]->dtype, TensorRole::kGradient));
    dy_ids.push_back(id);
    feeds[id] = *dys[i];
  }
  TestGradBuilder builder(r.graph, r.graph.tensor(outs[0]).producer, dy_ids);
  LOOM_ASSIGN_OR_RETURN(auto grad_ids, GetOpSchema(kind).grad(builder));
  LOOM_RET_CHECK(grad_ids.size() == inputs.size());
  LOOM_ASSIGN_OR_RETURN(TensorValues values, Evaluate(r.graph, feeds));
  for (const auto& g : grad_ids) {
    r.grads.push_back(g.has_value() ? values[*g] : std::nullopt);
  }
  return r;
}

}  // namespace loom::ir::testing
