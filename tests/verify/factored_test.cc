// Deriving factored plans on a slice of their expansion (verify/factored.h): the
// slice's verdict agrees with the explicit plan's, on correct plans and on plans
// whose bugs show only in later replicas or micro-batches.

#include "verify/factored.h"

#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"
#include "verify/verify.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

struct Outcome {
  bool failed = false;
  bool undecided = false;
  int64_t items = 0;
  std::string text;
};

Outcome Derive(const ir::Graph& spec, const ir::Plan& plan) {
  Outcome o;
  auto d = DeriveLineage(spec, plan);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return o;
  o.failed = !d->failures.empty();
  o.undecided = !d->undecided.empty();
  o.items = d->items;
  for (const Failure& f : d->failures) {
    absl::StrAppend(&o.text, FailureClassName(f.cls), " ", f.item, ": ", f.message, "\n");
  }
  for (const Undecided& u : d->undecided) absl::StrAppend(&o.text, "undecided ", u.item, ": ", u.reason, "\n");
  return o;
}

Outcome DeriveExpanded(const ir::Graph& spec, const ir::Plan& plan) {
  auto expanded = ir::ExpandPlan(spec, plan);
  EXPECT_TRUE(expanded.ok()) << expanded.status();
  if (!expanded.ok()) return {};
  return Derive(spec, *expanded);
}

struct PlanSetup {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  int64_t batch;
};

std::vector<PlanSetup> PlanSetups() {
  return {
      {"gpt2_dp4_mb3", "gpt2", Make(4, 1, 1, 3), 12},
      {"gpt2_dp3_tp2_zero1", "gpt2", Make(3, 2, 1, 2, 1, false, 1), 6},
      {"llama3_dp5_pp2_mb2", "llama3-8b", Make(5, 1, 2, 2), 10},
      {"llama3_dp4_tp2_sp_zero3", "llama3-8b", Make(4, 2, 1, 1, 1, true, 3), 4},
      {"llama3_dp3_zero2_mb4", "llama3-8b", Make(3, 1, 1, 4, 1, false, 2), 12},
  };
}

class FactoredTest : public ::testing::TestWithParam<PlanSetup> {
 protected:
  void SetUp() override {
    const PlanSetup& s = GetParam();
    spec_ = TinyStep(s.model, s.strategy.microbatches, s.strategy.pp, s.batch);
    transform::Strategy strategy = s.strategy;
    strategy.factored = true;
    auto plan = transform::Parallelize(spec_, strategy);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->is_factored());
    plan_ = *std::move(plan);
  }
  // A mutated copy of the plan, or nullopt when the mutation finds nothing to change.
  void ExpectAgreementOnMutant(const std::string& what,
                               const std::function<bool(ir::Plan&)>& mutate) {
    ir::Plan bad = plan_;
    if (!mutate(bad)) GTEST_SKIP() << "nothing to mutate for " << what;
    if (!ir::ValidatePlan(spec_, bad).ok()) GTEST_SKIP() << what << " makes an invalid plan";
    const Outcome sliced = Derive(spec_, bad);
    const Outcome full = DeriveExpanded(spec_, bad);
    ASSERT_TRUE(full.failed) << what << ": the explicit plan shows no failure";
    EXPECT_TRUE(sliced.failed) << what << " slips through the sliced derivation:\n" << sliced.text;
  }
  ir::Graph spec_;
  ir::Plan plan_;
};

TEST_P(FactoredTest, AgreesWithTheExplicitPlanAndDerivesLess) {
  const Outcome sliced = Derive(spec_, plan_);
  const Outcome full = DeriveExpanded(spec_, plan_);
  EXPECT_FALSE(full.failed || full.undecided) << full.text;
  EXPECT_FALSE(sliced.failed || sliced.undecided) << sliced.text;
  EXPECT_LT(sliced.items, full.items);
  auto report = Verify(spec_, plan_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, Verdict::kEquivalent);
}

// Replica r reads replica 0's rows of the data: wrong in every replica but 0.
TEST_P(FactoredTest, DataNotShiftedPerReplicaIsCaught) {
  ExpectAgreementOnMutant("data not shifted per replica", [&](ir::Plan& p) {
    for (ir::PlanValue& v : p.values) {
      if (v.dp_dim >= 0 && spec_.tensor(v.sub.tensor).producer == ir::kNoId) {
        v.dp_dim = -1;
        return true;
      }
    }
    return false;
  });
}

// A slice keeps replica 0's rows in every replica.
TEST_P(FactoredTest, SliceNotSteppedPerReplicaIsCaught) {
  ExpectAgreementOnMutant("slice not stepped per replica", [](ir::Plan& p) {
    for (ir::Task& t : p.tasks) {
      if (!t.dp_attr_steps.empty()) {
        for (auto& [name, step] : t.dp_attr_steps) step = 0;
        return true;
      }
    }
    return false;
  });
}

// A data-parallel all-reduce that stays inside each replica.
TEST_P(FactoredTest, ReductionNotAcrossReplicasIsCaught) {
  ExpectAgreementOnMutant("reduction not across replicas", [](ir::Plan& p) {
    for (ir::Collective& c : p.collectives) {
      if (c.spans_dp && c.kind == ir::CollectiveKind::kAllReduce) {
        c.spans_dp = false;
        return true;
      }
    }
    return false;
  });
}

INSTANTIATE_TEST_SUITE_P(Plans, FactoredTest, ::testing::ValuesIn(PlanSetups()),
                         [](const auto& info) { return info.param.name; });

// A micro-batch copy reading data of another shape computes outputs of other
// shapes (their types are inferred from the inputs): the spec is not symmetric.
TEST(FactoredSpecTest, CopiesReadingDataOfAnotherShapeAreNotSymmetric) {
  for (int64_t rows : {2, 4}) {
    ir::Graph g("g");
    ir::TensorId w = *g.AddInput("w", ir::Shape{3, 3}, ir::DType::kF32, ir::TensorRole::kParameter);
    for (int m = 0; m < 2; ++m) {
      ir::TensorId x = *g.AddInput(absl::StrCat("x.", m), ir::Shape{m == 1 ? rows : 2, 3},
                                   ir::DType::kF32, ir::TensorRole::kInput);
      ASSERT_TRUE(g.AddOp(ir::OpKind::kLinear, {x, w}, {}, {ir::Phase::kForward, 0, m},
                          {{absl::StrCat("y.", m)}})
                      .ok());
    }
    auto map = ir::MicrobatchMap::Build(g);
    ASSERT_TRUE(map.ok()) << map.status();
    EXPECT_EQ(CheckMicrobatchSymmetry(g, *map).ok(), rows == 2) << rows;
  }
}

// A spec whose micro-batches differ (one scales its loss differently) is not
// sliced: every copy is derived, and the difference is found.
TEST(FactoredSpecTest, MicrobatchesThatDifferAreDerivedOneByOne) {
  ir::Graph spec = TinyStep("gpt2", 3, 1, 6);
  transform::Strategy strategy = Make(2, 1, 1, 3);
  strategy.factored = true;
  auto plan = transform::Parallelize(spec, strategy);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto map = ir::MicrobatchMap::Build(spec);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE(CheckMicrobatchSymmetry(spec, *map).ok());
  auto sliced = SliceFactoredPlan(spec, *plan);
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  EXPECT_TRUE(sliced->has_value());

  // The same graph, tensor for tensor, with one scale of micro-batch 2 doubled.
  ir::Graph changed_spec(spec.name());
  bool changed = false;
  for (ir::TensorId t = 0; t < spec.num_tensors(); ++t) {
    const ir::Tensor& x = spec.tensor(t);
    if (x.producer == ir::kNoId) {
      ASSERT_TRUE(changed_spec.AddInput(x.name, x.shape, x.dtype, x.role).ok());
      continue;
    }
    if (x.output_index != 0) continue;
    const ir::Op& o = spec.op(x.producer);
    ir::AttrMap attrs = o.attrs;
    if (!changed && o.info.microbatch == 2 && o.kind == ir::OpKind::kScale) {
      auto f = attrs.GetFloat("factor");
      ASSERT_TRUE(f.ok()) << attrs.ToString();
      attrs.Set("factor", *f * 2);
      changed = true;
    }
    std::vector<ir::OutputSpec> outs;
    for (ir::TensorId y : o.outputs) outs.push_back({spec.tensor(y).name, spec.tensor(y).role});
    ASSERT_TRUE(changed_spec.AddOp(o.kind, o.inputs, attrs, o.info, outs).ok());
  }
  for (ir::TensorId t : spec.outputs()) changed_spec.AddOutput(t);
  ASSERT_TRUE(changed) << "no scale op in micro-batch 2";
  spec = std::move(changed_spec);
  map = ir::MicrobatchMap::Build(spec);
  if (!map.ok()) return;  // the map itself refuses the difference
  EXPECT_FALSE(CheckMicrobatchSymmetry(spec, *map).ok());
  sliced = SliceFactoredPlan(spec, *plan);
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  EXPECT_FALSE(sliced->has_value());
  auto report = Verify(spec, *plan);
  if (!report.ok()) return;  // refused as bad input: never a pass
  EXPECT_NE(report->verdict, Verdict::kEquivalent);
}

}  // namespace
}  // namespace loom::verify
