#include "schedule/block_model.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/placements.h"

namespace loom::schedule {
namespace {

using ::testing::HasSubstr;

Block MakeBlock(std::string name, int64_t span, int64_t memory, std::vector<int> devices,
                std::vector<int> preds = {}) {
  Block b;
  b.name = std::move(name);
  b.span = span;
  b.memory = memory;
  b.devices = std::move(devices);
  for (int p : preds) b.preds.push_back(Dep{p, 0});
  return b;
}

// A dependency cycle is named block by block.
TEST(BlockModelTest, RejectsCycleNamingItsBlocks) {
  BlockModel m{"loop", 1, {MakeBlock("a", 1, 0, {0}, {1}), MakeBlock("b", 1, 0, {0}, {0})}, {}};
  absl::Status s = ValidateBlockModel(m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dependency cycle: 'a' -> 'b' -> 'a'"));
}

// A block on a device the model does not have is refused with both numbers.
TEST(BlockModelTest, RejectsMissingDevice) {
  BlockModel m{"m", 4, {MakeBlock("F0", 1, 1, {5})}, {}};
  absl::Status s = ValidateBlockModel(m);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("block 'F0' (index 0): device 5 does not exist (the model has 4 devices)"));
}

// The cap check uses the least peak over orders: freeing first lowers the peak.
TEST(BlockModelTest, CapCheckUsesTheBestOrderOfOneMicrobatch) {
  // On device 0: `hold` (+1), and `take` (+2) then `give` (-2) after it; the order by
  // id peaks at 3, taking and giving first at 2.
  BlockModel m{"m", 1,
               {MakeBlock("hold", 1, 1, {0}), MakeBlock("take", 1, 2, {0}),
                MakeBlock("give", 1, -2, {0})},
               {}};
  m.blocks[2].preds = {Dep{1, 0}};
  m.SetUniformCap(2);
  EXPECT_TRUE(ValidateBlockModel(m).ok()) << ValidateBlockModel(m);
  m.SetUniformCap(1);
  absl::Status s = ValidateBlockModel(m);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("memory cap 1 on device 0 is below what one micro-batch needs (2)"));
}

// Spans must be positive and devices sorted and distinct.
TEST(BlockModelTest, RejectsBadSpansAndDevices) {
  BlockModel m{"m", 2, {MakeBlock("x", 0, 0, {0})}, {}};
  EXPECT_THAT(std::string(ValidateBlockModel(m).message()), HasSubstr("span must be in 1.."));
  m.blocks[0] = MakeBlock("x", 1, 0, {1, 0});
  EXPECT_THAT(std::string(ValidateBlockModel(m).message()), HasSubstr("sorted and distinct"));
}

// Work, critical path and the makespan bound of the V pipeline are the textbook ones.
TEST(BlockModelTest, VshapeFactsAndMakespanBound) {
  auto m = MakePlacement("vshape", 4);
  ASSERT_TRUE(m.ok());
  auto f = AnalyzeBlockModel(*m);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->max_work, 4);
  EXPECT_EQ(f->critical_path, 16);
  // 1F1B's optimum (N + D - 1)(F + B) = 131 * 4.
  EXPECT_EQ(MakespanLowerBound(*f, 128), 524);
  EXPECT_EQ(f->single_peak, (std::vector<int64_t>{1, 1, 1, 1}));
}

// The inference form keeps forward blocks only, with no memory.
TEST(BlockModelTest, InferenceFormDropsBackward) {
  auto m = MakePlacement("kshape", 4, /*inference=*/true);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->num_blocks(), 5);
  for (const Block& b : m->blocks) {
    EXPECT_EQ(b.kind, BlockKind::kForward);
    EXPECT_EQ(b.memory, 0);
  }
  EXPECT_TRUE(ValidateBlockModel(*m).ok());
}

// JSON round trip, dependencies with lag included.
TEST(BlockModelTest, JsonRoundTrip) {
  auto m = MakeStageModel(4, 8, "loop", StageCosts{1, 2, 1, 1, 2, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  m->SetUniformCap(9);
  auto back = BlockModelFromJson(BlockModelToJson(*m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *m);
}

// JSON errors name the file and the path.
TEST(BlockModelTest, JsonErrorsNameThePlace) {
  auto r = BlockModelFromJson(
      R"({"devices": 2, "blocks": [{"name": "a", "devices": [0]},
                                    {"name": "b", "devices": [1], "after": ["zz"]}]})",
      "blocks.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(std::string(r.status().message()), "blocks.json: blocks[1].after[0]: unknown block 'zz'");
  r = BlockModelFromJson(R"({"devices": 2, "blocks": [{"name": "a", "devices": [3]}]})", "b.json");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("b.json: block 'a' (index 0): device 3"));
  r = BlockModelFromJson("{", "c.json");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("c.json: "));
  r = BlockModelFromJson(R"({"devices": 1, "blocks": [{"name": "a", "kind": "sideways", "devices": [0]}]})",
                         "d.json");
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("unknown block kind 'sideways'"));
}

}  // namespace
}  // namespace loom::schedule

namespace loom::schedule {
namespace {

// A key the format does not have is an error naming it, not a field silently
// dropped (a dependency list under another name would leave the blocks unordered).
TEST(BlockModelJsonTest, UnknownKeysAreErrors) {
  auto m = BlockModelFromJson(
      R"({"devices": 1, "blocks": [{"name": "a", "devices": [0]},
                                  {"name": "b", "devices": [0], "preds": ["a"]}]})",
      "chain.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(std::string(m.status().message()),
            "chain.json: blocks[1].preds: unknown key; its keys: name, kind, stage, span, memory, "
            "devices, after");
  m = BlockModelFromJson(R"({"devices": 1, "memory_caps": 3, "blocks": []})", "m.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("did you mean 'memory_cap'"),
            std::string::npos)
      << m.status();
  m = BlockModelFromJson(
      R"({"devices": 1, "blocks": [{"name": "a", "devices": [0]},
          {"name": "b", "devices": [0], "after": [{"block": "a", "lags": 2}]}]})",
      "m.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("blocks[1].after[0].lags: unknown key"),
            std::string::npos)
      << m.status();
}

}  // namespace
}  // namespace loom::schedule
