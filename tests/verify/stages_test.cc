// Stage classes (verify/stages.h): alike layers are derived once, and a bug in
// one layer, or the same bug in every layer, is still reported where it is.

#include "verify/stages.h"

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"
#include "verify/derive.h"

namespace loom::verify {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;

class StagesTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    // One layer per pipeline stage: every layer's inputs arrive complete, or as
    // the per-rank shares of a sum (opaque shares).
    spec_ = TinyStep("llama3-8b", 2, 4, 4);
    transform::Strategy s = Make(2, 2, 4, 2);
    s.factored = GetParam();
    auto plan = transform::Parallelize(spec_, s);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan_ = *std::move(plan);
  }

  // The layers of the tasks the failures name ("task 12 'linear'").
  std::set<int> FailingLayers(const Derivation& d, const ir::Plan& plan) {
    std::set<int> layers;
    for (const Failure& f : d.failures) {
      int id = -1;
      const std::string prefix = "task ";
      if (f.item.rfind(prefix, 0) != 0) continue;
      const std::string rest = f.item.substr(prefix.size(), f.item.find(' ', prefix.size()) -
                                                                 prefix.size());
      if (absl::SimpleAtoi(rest, &id) && id >= 0 && id < static_cast<int>(plan.tasks.size())) {
        layers.insert(plan.tasks[id].info.layer);
      }
    }
    return layers;
  }

  // The first optimizer update of `layer` reads its parameter where it reads
  // the gradient (a bug whose effect stays in the layer); false if there is none.
  static bool GradFromParameter(ir::Plan& plan, int layer) {
    for (ir::Task& t : plan.tasks) {
      if (t.info.layer == layer && t.op != ir::kNoId && t.info.phase == ir::Phase::kOptimizer &&
          t.inputs.size() >= 2 &&
          plan.values[t.inputs[0]].sub.box == plan.values[t.inputs[1]].sub.box &&
          plan.values[t.inputs[0]].sub.tensor != plan.values[t.inputs[1]].sub.tensor) {
        t.inputs[1] = t.inputs[0];
        return true;
      }
    }
    return false;
  }

  ir::Graph spec_;
  ir::Plan plan_;
};

TEST_P(StagesTest, AlikeLayersAreDerivedOnce) {
  auto d = DeriveLineage(spec_, plan_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->failures.empty());
  EXPECT_TRUE(d->undecided.empty());
  EXPECT_GE(d->stages, 3);
  EXPECT_LT(d->distinct_stages, d->stages);
  EXPECT_GE(d->stages_reused, 1);
}

TEST_P(StagesTest, PartitionPairsAlikeStagesPositionByPosition) {
  auto expanded = ir::ExpandPlan(spec_, plan_);
  ASSERT_TRUE(expanded.ok());
  StageOptions options;
  options.find_shares = true;
  const StagePartition parts = PartitionStages(spec_, *expanded, options);
  bool some_class = false;
  for (const auto& cls : parts.classes) {
    if (cls.size() < 2) continue;
    some_class = true;
    const Stage& a = parts.stages[cls[0]];
    for (int s : cls) {
      const Stage& b = parts.stages[s];
      ASSERT_EQ(a.items.size(), b.items.size());
      ASSERT_EQ(a.values.size(), b.values.size());
      ASSERT_EQ(a.ops.size(), b.ops.size());
      for (size_t i = 0; i < a.ops.size(); ++i) {
        EXPECT_EQ(spec_.op(a.ops[i]).kind, spec_.op(b.ops[i]).kind);
        EXPECT_EQ(spec_.op(a.ops[i]).attrs, spec_.op(b.ops[i]).attrs);
      }
      for (size_t i = 0; i < a.values.size(); ++i) {
        EXPECT_EQ(expanded->values[a.values[i]].sub.box, expanded->values[b.values[i]].sub.box);
      }
    }
  }
  EXPECT_TRUE(some_class);
}

TEST_P(StagesTest, BugInOneLayerIsFoundThere) {
  auto expanded = ir::ExpandPlan(spec_, plan_);
  ASSERT_TRUE(expanded.ok());
  ir::Plan bad = *expanded;
  ASSERT_TRUE(GradFromParameter(bad, 2));
  auto d = DeriveLineage(spec_, bad);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_FALSE(d->failures.empty());
  EXPECT_EQ(FailingLayers(*d, bad), std::set<int>({2}));
}

TEST_P(StagesTest, SameBugInEveryLayerIsFoundInEach) {
  auto expanded = ir::ExpandPlan(spec_, plan_);
  ASSERT_TRUE(expanded.ok());
  ir::Plan bad = *expanded;
  for (int layer = 0; layer < 4; ++layer) ASSERT_TRUE(GradFromParameter(bad, layer));
  auto d = DeriveLineage(spec_, bad);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->stages_reused, 0);
  EXPECT_EQ(FailingLayers(*d, bad), std::set<int>({0, 1, 2, 3}));
}

// A helping thread takes stages from the back: the classes, and every stage's
// renaming, are those one thread finds.
TEST_P(StagesTest, HelpedPartitionIsTheSame) {
  auto expanded = ir::ExpandPlan(spec_, plan_);
  ASSERT_TRUE(expanded.ok());
  StageOptions options;
  options.find_shares = true;
  const StagePartition alone = PartitionStages(spec_, *expanded, options);
  for (int run = 0; run < 5; ++run) {
    EncodeHelp help;
    std::thread helper([&] { help.Help(); });
    options.help = &help;
    const StagePartition helped = PartitionStages(spec_, *expanded, options);
    help.Close();
    helper.join();
    EXPECT_EQ(helped.classes, alone.classes);
    ASSERT_EQ(helped.stages.size(), alone.stages.size());
    for (size_t k = 0; k < alone.stages.size(); ++k) {
      EXPECT_EQ(helped.stages[k].items, alone.stages[k].items);
      EXPECT_EQ(helped.stages[k].values, alone.stages[k].values);
      EXPECT_EQ(helped.stages[k].ops, alone.stages[k].ops);
      EXPECT_EQ(helped.stages[k].tensors, alone.stages[k].tensors);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, StagesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("factored") : std::string("explicit");
                         });

// The helper returns once the offer is closed, or made and withdrawn, whether
// or not it took the job; a job offered runs once, and withdrawing waits for it.
TEST(EncodeHelpTest, HelpReturnsWhenTheOfferIsOverAndRunsItOnce) {
  {
    EncodeHelp help;
    help.Close();
    help.Help();  // returns: closed, nothing offered
    int runs = 0;
    help.Offer([&] { ++runs; });  // after Close: ignored
    help.Help();
    EXPECT_EQ(runs, 0);
  }
  {
    EncodeHelp help;
    int runs = 0;
    help.Offer([&] { ++runs; });
    help.Withdraw();  // nobody took it
    help.Help();      // returns at once: the offer is over
    EXPECT_EQ(runs, 0);
    help.Close();
  }
  {
    EncodeHelp help;
    std::atomic<bool> started{false};
    std::atomic<int> runs{0};
    help.Offer([&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++runs;
    });
    std::thread helper([&] { help.Help(); });
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    help.Withdraw();  // waits for the running job
    EXPECT_EQ(runs.load(), 1);
    help.Close();
    helper.join();
    EXPECT_EQ(runs.load(), 1);
  }
}

}  // namespace
}  // namespace loom::verify
