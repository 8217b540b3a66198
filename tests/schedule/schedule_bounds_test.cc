// Block models and schedules whose numbers would overflow a time or memory sum,
// or make a time grid without end, are refused where the number is; a long
// schedule still draws (scaled down) and a time limit is kept.

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/chain_model.h"
#include "schedule/block_model.h"
#include "schedule/placements.h"
#include "schedule/render.h"
#include "schedule/schedule.h"
#include "schedule/search.h"
#include "schedule/torch_csv.h"

namespace loom::schedule {
namespace {

std::string TwoBlocks(const std::string& span, const std::string& lag,
                      const std::string& memory) {
  return absl::StrCat(
      R"({"format": "loom.blocks", "version": 1, "name": "m", "devices": 2, "blocks": [)",
      R"({"name": "F0", "kind": "forward", "stage": 0, "span": )", span,
      R"(, "memory": )", memory, R"(, "devices": [0], "after": []},)",
      R"({"name": "F1", "kind": "forward", "stage": 1, "span": 1, "memory": 0, "devices": [1],)",
      R"( "after": [{"block": "F0", "lag": )", lag, R"(}]}]})");
}

TEST(ScheduleBoundsTest, SpansLagsAndMemoryAreBounded) {
  EXPECT_TRUE(BlockModelFromJson(TwoBlocks("1048576", "1048576", "1099511627776"), "m.json").ok());
  struct Case {
    std::string span, lag, memory, words;
  };
  for (const Case& c : {Case{"4611686018427387904", "1", "1", "span must be in 1..1048576"},
                        Case{"1", "4611686018427387904", "1", "lag 4611686018427387904"},
                        Case{"1", "1", "4611686018427387904", "memory 4611686018427387904"},
                        Case{"1", "1", "-4611686018427387904", "is outside -1099511627776"}}) {
    auto m = BlockModelFromJson(TwoBlocks(c.span, c.lag, c.memory), "m.json");
    ASSERT_FALSE(m.ok()) << c.words;
    EXPECT_TRUE(absl::StrContains(m.status().message(), c.words)) << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), "m.json")) << m.status();
  }
}

// The longest schedule the bounds allow: its chart is scaled to a bounded width,
// and the torch CSV, a column per time unit, is refused.
TEST(ScheduleBoundsTest, LongSchedulesDrawScaledAndTheirCsvIsRefused) {
  StageCosts costs;
  costs.forward = 1 << 20;
  costs.backward_input = 1 << 20;
  costs.backward_weight = 0;
  auto model = MakeStageModel(2, 2, "loop", costs);
  ASSERT_TRUE(model.ok()) << model.status();
  SearchOptions options;
  options.microbatches = 64;
  auto r = SearchSchedule(*model, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->sim.makespan, 1000000);
  const std::string svg = ScheduleToSvg(*model, r->schedule, r->sim, SvgOptions{});
  EXPECT_LT(svg.size(), 4u << 20);
  auto csv = ScheduleToTorchCsv(*model, r->schedule, &r->sim);
  ASSERT_FALSE(csv.ok());
  EXPECT_TRUE(absl::StrContains(csv.status().message(), "a column per unit")) << csv.status();
}

// A chain of thousands of blocks whose every search node is slow: the search
// stops at its time limit and says so.
TEST(ScheduleBoundsTest, TheTimeLimitIsKept) {
  BlockModel m = loom::testing::ChainModel(5000, 2);
  m.SetUniformCap(0);
  SearchOptions options;
  options.microbatches = 4;
  options.time_limit_seconds = 1;
  const auto start = std::chrono::steady_clock::now();
  auto r = SearchSchedule(m, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 6.0);  // a limit of 1 s (the clock once per 4096 nodes took 25 s)
  if (!r.ok()) {
    EXPECT_TRUE(absl::StrContains(r.status().message(), "time limit")) << r.status();
  }
}

}  // namespace
}  // namespace loom::schedule
