#include "transform/balanced_chunks.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "exec/plan_interpreter.h"
#include "gtest/gtest.h"
#include "ir/plan.h"
#include "tests/testing/strategy_matrix.h"
#include "tests/testing/tiny_step.h"
#include "transform/parallelize.h"

namespace loom::transform {
namespace {

using ::loom::testing::Make;
using ::loom::testing::TinyStep;
using ::loom::testing::WithCp;

Strategy Contiguous(Strategy s) {
  s.cp_balanced = false;
  return s;
}

// The sequence intervals of the plan's `tokens` values on each device.
std::map<int64_t, std::set<std::pair<int64_t, int64_t>>> TokenChunks(const ir::Graph& spec,
                                                                   const ir::Plan& plan) {
  std::map<int64_t, std::set<std::pair<int64_t, int64_t>>> chunks;
  for (const ir::PlanValue& v : plan.values) {
    const ir::Tensor& t = spec.tensor(v.sub.tensor);
    if (t.producer != ir::kNoId || t.role != ir::TensorRole::kInput || t.shape.rank() != 2) {
      continue;
    }
    chunks[v.device].insert({v.sub.box[1].begin, v.sub.box[1].end});
  }
  return chunks;
}

int CountOnDevice(const ir::Plan& plan, ir::OpKind kind, int64_t device) {
  int n = 0;
  for (const ir::Task& t : plan.tasks) n += t.kind == kind && t.device == device;
  return n;
}

// Rank r holds chunks r and 2cp - 1 - r of the sequence (eight tokens, cp 2 and 4).
TEST(BalancedChunksTest, RankRHoldsChunksRAndTheirMirror) {
  const ir::Graph spec = TinyStep("llama3-8b", 1, 2, 2);
  for (int cp : {2, 4}) {
    auto plan = Parallelize(spec, WithCp(Make(1, 1, 1, 1), cp));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->mesh.num_devices(), cp);
    const int64_t w = 8 / (2 * cp);
    const auto chunks = TokenChunks(spec, *plan);
    for (int64_t r = 0; r < cp; ++r) {
      const std::set<std::pair<int64_t, int64_t>> want = {{r * w, (r + 1) * w},
                                                          {(2 * cp - 1 - r) * w, (2 * cp - r) * w}};
      EXPECT_EQ(chunks.at(r), want) << "cp " << cp << " rank " << r;
    }
    // Each rank's attention pieces sit at its two chunks' places.
    for (int64_t r = 0; r < cp; ++r) {
      std::set<int64_t> offsets;
      for (const ir::Task& t : plan->tasks) {
        if (t.kind == ir::OpKind::kAttention && t.device == r) {
          offsets.insert(t.attrs.Has("q_offset") ? *t.attrs.GetInt("q_offset") : 0);
        }
      }
      EXPECT_EQ(offsets, (std::set<int64_t>{r * w, (2 * cp - 1 - r) * w})) << "rank " << r;
    }
  }
}

// The keys are gathered in two halves: chunks 0..cp-1 from ranks 0..cp-1, chunks
// cp..2cp-1 from the same ranks in reverse order.
TEST(BalancedChunksTest, SecondHalfIsGatheredFromTheRanksReversed) {
  const ir::Graph spec = TinyStep("llama3-8b", 1, 1, 2);
  auto plan = Parallelize(spec, WithCp(Make(1, 1, 1, 1), 4));
  ASSERT_TRUE(plan.ok()) << plan.status();
  int forward = 0, reversed = 0;
  for (const ir::Collective& c : plan->collectives) {
    if (c.kind != ir::CollectiveKind::kAllGather || c.phase != ir::Phase::kForward) continue;
    ++forward;
    ASSERT_EQ(c.devices.size(), 4u);
    if (c.devices == std::vector<int64_t>{3, 2, 1, 0}) {
      ++reversed;
      // Member k holds chunk 4 + k.
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(plan->values[c.inputs[k]].sub.box[1].begin, 4 + k);
      }
    } else {
      EXPECT_EQ(c.devices, (std::vector<int64_t>{0, 1, 2, 3}));
    }
  }
  EXPECT_GT(forward, 0);
  EXPECT_EQ(reversed * 2, forward);
}

// Work both chunks of a rank would repeat is done once: the parameters, their
// updates, the gradient accumulation over micro-batches and the norm's pieces
// number as under contiguous chunks; and the plan holds the step exactly.
TEST(BalancedChunksTest, RepeatedWorkIsDoneOnce) {
  const ir::Graph spec = TinyStep("llama3-8b", 2, 2, 4);
  for (const Strategy& s : {WithCp(Make(1, 1, 2, 2, 1, false, 0, true), 2),
                            WithCp(Make(2, 2, 1, 2), 2)}) {
    auto balanced = Parallelize(spec, s);
    ASSERT_TRUE(balanced.ok()) << balanced.status();
    auto contiguous = Parallelize(spec, Contiguous(s));
    ASSERT_TRUE(contiguous.ok()) << contiguous.status();
    for (int64_t d = 0; d < balanced->mesh.num_devices(); ++d) {
      for (ir::OpKind kind : {ir::OpKind::kAdamW, ir::OpKind::kSumSquares, ir::OpKind::kClipCoef}) {
        EXPECT_EQ(CountOnDevice(*balanced, kind, d), CountOnDevice(*contiguous, kind, d))
            << s.ToString() << " device " << d << " " << ir::OpKindName(kind);
      }
      int inputs_b = 0, inputs_c = 0;
      for (const ir::PlanValue& v : balanced->values) {
        inputs_b += v.device == d && spec.tensor(v.sub.tensor).role == ir::TensorRole::kParameter;
      }
      for (const ir::PlanValue& v : contiguous->values) {
        inputs_c += v.device == d && spec.tensor(v.sub.tensor).role == ir::TensorRole::kParameter;
      }
      EXPECT_EQ(inputs_b, inputs_c) << s.ToString() << " device " << d;
    }
    auto report = exec::CheckPlanNumerics(spec, *balanced, /*seed=*/3);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
  }
}

TEST(BalancedChunksTest, RefusesASequenceTheChunksDoNotDivide) {
  const ir::Graph spec = TinyStep("llama3-8b", 1, 1, 2);  // eight tokens
  auto plan = Parallelize(spec, WithCp(Make(1, 1, 1, 1), 8));
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::StrContains(plan.status().message(),
                                "2 x cp = 16 load-balanced chunks does not divide the sequence "
                                "length 8"))
      << plan.status();
  EXPECT_TRUE(Parallelize(spec, Contiguous(WithCp(Make(1, 1, 1, 1), 8))).ok());
}

TEST(BalancedChunksTest, FoldNeedsAVirtualCpAxis) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({{"dp", 2}, {"tp", 2}});
  auto folded = FoldBalancedChunks(plan, 2);
  ASSERT_FALSE(folded.ok());
  EXPECT_TRUE(absl::StrContains(folded.status().message(), "cp axis of 4 virtual ranks"));
}

}  // namespace
}  // namespace loom::transform
