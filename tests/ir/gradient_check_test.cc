// Finite-difference check of every gradient rule, over the op samples.

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/interpreter.h"
#include "ir/op_schema.h"
#include "ir/status_macros.h"
#include "tests/ir/op_samples.h"

namespace loom::ir {
namespace {

using testing::OpSample;

struct Case {
  OpKind kind;
  uint64_t seed;
};

// Every op kind with a gradient rule, under three seeds.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int i = 0; i < kNumOpKinds; ++i) {
    OpKind kind = static_cast<OpKind>(i);
    if (GetOpSchema(kind).grad == nullptr) continue;
    // stop_gradient's correct gradient is "none": its rule returns no gradient, which
    // a finite-difference check cannot compare (ops_vocab_split_test covers it).
    if (kind == OpKind::kStopGradient) continue;
    for (uint64_t seed : {1, 2, 3}) cases.push_back({kind, seed});
  }
  return cases;
}

// The sample's op followed by loss = sum_i sum(out_i * w_i) with fixed random weights,
// so that every output gets a distinct upstream gradient.
struct Harness {
  Graph graph{"grad_check"};
  std::vector<TensorId> inputs;
  std::vector<TensorId> weights;
  TensorId loss = kNoId;
};

absl::StatusOr<Harness> BuildHarness(const OpSample& sample) {
  Harness h;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(TensorId id,
                          h.graph.AddInput(absl::StrCat("x", i), sample.inputs[i].shape,
                                           sample.inputs[i].dtype, TensorRole::kInput));
    h.inputs.push_back(id);
  }
  LOOM_ASSIGN_OR_RETURN(auto out_types,
                        InferOutputTypes(sample.kind, sample.inputs, sample.attrs));
  std::vector<OutputSpec> specs;
  for (size_t i = 0; i < out_types.size(); ++i) specs.push_back({absl::StrCat("y", i)});
  LOOM_ASSIGN_OR_RETURN(auto outs,
                        h.graph.AddOp(sample.kind, h.inputs, sample.attrs, OpInfo{}, specs));
  std::vector<TensorId> terms;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& y = h.graph.tensor(outs[i]);
    if (!IsFloat(y.dtype)) continue;
    Shape shape = y.shape;
    DType dtype = y.dtype;
    int rank = shape.rank();
    LOOM_ASSIGN_OR_RETURN(TensorId w, h.graph.AddInput(absl::StrCat("w", i), shape, dtype,
                                                       TensorRole::kInput));
    h.weights.push_back(w);
    LOOM_ASSIGN_OR_RETURN(auto prod, h.graph.AddOp(OpKind::kMul, {outs[i], w}, {}, OpInfo{},
                                                   {{absl::StrCat("p", i)}}));
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(d);
    LOOM_ASSIGN_OR_RETURN(auto term, h.graph.AddOp(OpKind::kSum, {prod[0]}, {{"dims", dims}},
                                                   OpInfo{}, {{absl::StrCat("t", i)}}));
    terms.push_back(term[0]);
  }
  LOOM_RET_CHECK(!terms.empty());
  h.loss = terms[0];
  if (terms.size() > 1) {
    LOOM_ASSIGN_OR_RETURN(auto total, h.graph.AddOp(OpKind::kAccumulate, terms, {}, OpInfo{},
                                                    {{"loss", TensorRole::kLoss}}));
    h.loss = total[0];
  }
  return h;
}

class FiniteDifferenceTest : public ::testing::TestWithParam<Case> {};

// The analytic gradient of every float input matches central differences (fp64).
TEST_P(FiniteDifferenceTest, MatchesAnalyticGradient) {
  const Case& c = GetParam();
  int checked = 0;
  for (const OpSample& sample : testing::AllSamples(c.seed)) {
    if (sample.kind != c.kind) continue;
    SCOPED_TRACE(sample.label);
    // A sample whose outputs are all integers or bools (a cast to i64) has no
    // gradient to check.
    auto out_types = InferOutputTypes(sample.kind, sample.inputs, sample.attrs);
    ASSERT_TRUE(out_types.ok()) << out_types.status();
    if (std::none_of(out_types->begin(), out_types->end(),
                     [](const TensorType& t) { return IsFloat(t.dtype); })) {
      continue;
    }
    auto forward = BuildHarness(sample);
    ASSERT_TRUE(forward.ok()) << forward.status();
    Harness full = *forward;  // forward + backward
    std::vector<TensorId> wrt;
    for (TensorId id : full.inputs) {
      if (IsFloat(full.graph.tensor(id).dtype)) wrt.push_back(id);
    }
    auto grads = AppendBackward(full.graph, full.loss, wrt);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_TRUE(full.graph.Validate().ok()) << full.graph.Validate();

    std::mt19937_64 rng(c.seed * 7919 + checked);
    std::vector<HostTensor> values = testing::SampleInputs(sample, rng);
    absl::flat_hash_map<TensorId, HostTensor> feeds;
    for (size_t i = 0; i < values.size(); ++i) feeds[full.inputs[i]] = values[i];
    std::uniform_real_distribution<double> wdist(-1.0, 1.0);
    for (TensorId w : full.weights) {
      HostTensor v(full.graph.tensor(w).shape, DType::kF64);
      for (double& x : v.data) x = wdist(rng);
      feeds[w] = std::move(v);
    }
    auto result = Evaluate(full.graph, feeds);
    ASSERT_TRUE(result.ok()) << result.status();

    auto loss_at = [&](const absl::flat_hash_map<TensorId, HostTensor>& f) {
      auto r = Evaluate(forward->graph, f);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? (*(*r)[forward->loss])[0] : 0.0;
    };
    constexpr double kStep = 1e-5;
    for (size_t w = 0; w < wrt.size(); ++w) {
      ASSERT_TRUE((*grads)[w].has_value()) << "no gradient for input " << w;
      const HostTensor& analytic = *(*result)[*(*grads)[w]];
      HostTensor& x = feeds[wrt[w]];
      for (int64_t e = 0; e < x.size(); ++e) {
        const double saved = x[e];
        x[e] = saved + kStep;
        const double up = loss_at(feeds);
        x[e] = saved - kStep;
        const double down = loss_at(feeds);
        x[e] = saved;
        const double numeric = (up - down) / (2 * kStep);
        EXPECT_NEAR(analytic[e], numeric, 1e-6 + 1e-5 * std::abs(numeric))
            << "d loss / d " << full.graph.tensor(wrt[w]).name << "[" << e << "]";
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no sample for " << OpKindName(c.kind);
}

INSTANTIATE_TEST_SUITE_P(
    EveryOpWithGradient, FiniteDifferenceTest, ::testing::ValuesIn(Cases()),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(OpKindName(info.param.kind), "_seed", info.param.seed);
    });

}  // namespace
}  // namespace loom::ir
