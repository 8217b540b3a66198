// The fast derivation (opaque shares, alike layers folded before slicing) on its
// own, without the plain derivation to fall back on: it must derive every plan
// of the strategy matrix cleanly, explicit and factored, fold the alike layers of
// deeper models, and never derive a mutated plan cleanly.

#include "verify/fold.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

std::string Findings(const Derivation& d) {
  std::string s;
  for (const Failure& f : d.failures) {
    absl::StrAppend(&s, FailureClassName(f.cls), " ", f.item, ": ", f.message, "\n");
  }
  for (const Undecided& u : d.undecided) absl::StrAppend(&s, "undecided ", u.item, ": ", u.reason, "\n");
  return s.substr(0, 3000);
}

Derivation FastOnly(const ir::Graph& spec, const ir::Plan& plan) {
  DeriveOptions options;
  options.plain = false;
  auto d = DeriveLineage(spec, plan, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : Derivation{};
}

class FoldMatrixTest : public ::testing::TestWithParam<::loom::testing::Case> {};

TEST_P(FoldMatrixTest, FastDerivationIsClean) {
  const auto& c = GetParam();
  ir::Graph spec = TinyStep(c.model, c.strategy.microbatches, c.layers,
                            c.batch > 0 ? c.batch : 2 * c.strategy.dp);
  for (bool factored : {false, true}) {
    SCOPED_TRACE(factored ? "factored" : "explicit");
    auto s = c.strategy;
    s.factored = factored;
    auto plan = transform::Parallelize(spec, s);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Derivation d = FastOnly(spec, *plan);
    EXPECT_TRUE(d.failures.empty() && d.undecided.empty()) << Findings(d);
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, FoldMatrixTest,
                         ::testing::ValuesIn(::loom::testing::Matrix()),
                         [](const auto& info) { return info.param.name; });

struct Deep {
  std::string name;
  std::string model;
  transform::Strategy strategy;
  int layers;
};

class FoldDeepTest : public ::testing::TestWithParam<Deep> {};

// Deeper models: the alike layers of each pipeline stage are folded in the unit,
// the fast derivation is clean and agrees with the plain one.
TEST_P(FoldDeepTest, AlikeLayersAreFolded) {
  const Deep& c = GetParam();
  ir::Graph spec = TinyStep(c.model, c.strategy.microbatches, c.layers, 2 * c.strategy.dp);
  auto s = c.strategy;
  s.factored = true;
  auto plan = transform::Parallelize(spec, s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto mbmap = ir::MicrobatchMap::Build(spec);
  ASSERT_TRUE(mbmap.ok());
  const LayerFold fold = FoldLayers(spec, *plan, *mbmap);
  EXPECT_GE(fold.members.size(), static_cast<size_t>(c.layers / (2 * c.strategy.pp)))
      << "too few layers folded";
  EXPECT_GT(fold.folded_items, 0);

  const Derivation fast = FastOnly(spec, *plan);
  EXPECT_TRUE(fast.failures.empty() && fast.undecided.empty()) << Findings(fast);
  EXPECT_GE(fast.stages_reused, static_cast<int64_t>(fold.members.size()));
  DeriveOptions plain;
  plain.fast = false;
  auto d = DeriveLineage(spec, *plan, plain);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->failures.empty() && d->undecided.empty()) << Findings(*d);
  // Fewer items derived, the same laws relied on.
  EXPECT_LT(fast.items, d->items);
  ASSERT_EQ(fast.laws.size(), d->laws.size());
  for (size_t i = 0; i < fast.laws.size(); ++i) EXPECT_EQ(fast.laws[i].key, d->laws[i].key);
}

INSTANTIATE_TEST_SUITE_P(
    Models, FoldDeepTest,
    ::testing::Values(Deep{"llama3_dp3_tp2_pp2_mb3", "llama3-8b", Make(3, 2, 2, 3), 8},
                      Deep{"gpt2_dp2_tp2_pp1_mb2", "gpt2", Make(2, 2, 1, 2), 6},
                      Deep{"llama3_dp2_tp2_sp_zero1", "llama3-8b", Make(2, 2, 1, 2, 1, true, 1),
                           6},
                      Deep{"llama3_recompute_pp2_vpp2", "llama3-8b",
                           Make(2, 2, 2, 2, 2, false, 0, true), 12},
                      Deep{"llama3_zero3_dp3", "llama3-8b", Make(3, 2, 1, 2, 1, false, 3), 6}),
    [](const auto& info) { return info.param.name; });

// A factored plan of an 8-layer model whose alike layers fold, derived clean.
ir::Plan FoldablePlan(const ir::Graph& spec) {
  transform::Strategy s = Make(2, 2, 1, 2);
  s.factored = true;
  auto plan = transform::Parallelize(spec, s);
  EXPECT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan.ok() && DeriveLineage(spec, *plan).ok());
  return plan.ok() ? *std::move(plan) : ir::Plan{};
}

// The full plan checks refuse `plan`, and the derivation, on one thread or two,
// refuses it with their message.
void ExpectRefusedAsTheChecksRefuse(const ir::Graph& spec, const ir::Plan& plan) {
  const absl::Status full = ir::ValidatePlan(spec, plan);
  ASSERT_FALSE(full.ok());
  for (int threads : {1, 2}) {
    DeriveOptions options;
    options.threads = threads;
    auto d = DeriveLineage(spec, plan, options);
    ASSERT_FALSE(d.ok()) << threads;
    EXPECT_EQ(d.status().message(), full.message()) << threads;
  }
}

// The plan's types are checked for every item the fold keeps; an item it leaves
// out has an alike one that is checked. A type error in one layer of many alike
// ones makes that layer unlike the others: the plan is refused, as the full
// checks refuse it.
TEST(FoldChecksTest, TypeErrorInOneOfManyAlikeLayersIsRefused) {
  const ir::Graph spec = TinyStep("llama3-8b", 2, 8, 4);
  ir::Plan plan = FoldablePlan(spec);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // A task's output of layer 5 one row short.
  bool mutated = false;
  for (ir::Task& t : plan.tasks) {
    if (t.info.layer != 5 || t.kind != ir::OpKind::kRmsNorm) continue;
    ir::Box& box = plan.values[t.outputs[0]].sub.box;
    ASSERT_GT(box.back().size(), 1);
    box.back().end -= 1;
    mutated = true;
    break;
  }
  ASSERT_TRUE(mutated);
  ExpectRefusedAsTheChecksRefuse(spec, plan);
}

// The same for a value a layer only reads: a weight of layer 5 whose box lies
// past its tensor. The values left-out layers read are left out of the type
// checks too (each has the type of the representative's value in its place),
// so the bad one must make its layer unlike the others.
TEST(FoldChecksTest, BadBoxOfAWeightOneLayerReadsIsRefused) {
  const ir::Graph spec = TinyStep("llama3-8b", 2, 8, 4);
  ir::Plan plan = FoldablePlan(spec);
  ASSERT_FALSE(::testing::Test::HasFailure());
  // A value no task computes, read by a layer-5 task: a weight's piece.
  std::vector<char> computed(plan.values.size(), 0);
  for (const ir::Task& t : plan.tasks) {
    for (ir::ValueId v : t.outputs) computed[v] = 1;
  }
  for (const ir::Collective& c : plan.collectives) {
    for (ir::ValueId v : c.outputs) computed[v] = 1;
  }
  bool mutated = false;
  for (const ir::Task& t : plan.tasks) {
    if (t.info.layer != 5 || t.kind != ir::OpKind::kLinear) continue;
    for (ir::ValueId v : t.inputs) {
      if (computed[v] || spec.tensor(plan.values[v].sub.tensor).role != ir::TensorRole::kParameter) {
        continue;
      }
      ir::Box& box = plan.values[v].sub.box;
      box.back().begin += 1;
      box.back().end += 1;
      mutated = true;
      break;
    }
    if (mutated) break;
  }
  ASSERT_TRUE(mutated);
  ExpectRefusedAsTheChecksRefuse(spec, plan);
}

// The fold starts before the plan is checked: where an id the plan names is out
// of range it folds nothing, and the derivation refuses the plan with the
// checks' error instead of reading past an array.
TEST(FoldIdsTest, IdsOutOfRangeFoldNothingAndTheChecksSayWhere) {
  const ir::Graph spec = TinyStep("llama3-8b", 2, 6, 4);
  transform::Strategy s = Make(2, 2, 2, 2);
  s.factored = true;
  auto plan = transform::Parallelize(spec, s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ir::ValueId nv = static_cast<ir::ValueId>(plan->values.size());
  auto mbmap = ir::MicrobatchMap::Build(spec);
  ASSERT_TRUE(mbmap.ok());
  auto await = [&]() -> const ir::MicrobatchMap* { return &*mbmap; };
  ASSERT_TRUE(FoldLayers(spec, *plan, await).has_value());

  struct Mutation {
    std::string name;
    std::function<void(ir::Plan&)> apply;
    std::string expected;  // in the error
  };
  const std::vector<Mutation> mutations = {
      {"task input", [&](ir::Plan& p) { p.tasks[p.tasks.size() / 2].inputs[0] = nv + 5; },
       absl::StrCat(nv + 5)},
      {"collective output",
       [&](ir::Plan& p) { p.collectives[p.collectives.size() / 2].outputs[0] = -3; }, "-3"},
      {"task op", [&](ir::Plan& p) { p.tasks[1].op = spec.num_ops() + 7; },
       absl::StrCat(spec.num_ops() + 7)},
      {"plan output", [&](ir::Plan& p) { p.outputs.back() = nv; }, absl::StrCat(nv)},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(m.name);
    ir::Plan bad = *plan;
    m.apply(bad);
    EXPECT_FALSE(FoldLayers(spec, bad, await).has_value());
    DeriveOptions options;
    options.threads = 2;
    auto d = DeriveLineage(spec, bad, options);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find(m.expected), std::string::npos) << d.status();
  }
}

}  // namespace
}  // namespace loom::verify
