#include "schedule/placements.h"

#include <cstdlib>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "schedule/block_model.h"

namespace loom::schedule {
namespace {

std::string TestData(const std::string& file) {
  const char* root = std::getenv("LOOM_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/tests/schedule/testdata/" + file;
}

// Every preset placement equals Tessel's own dump of it (block by block in chain
// order: kind, span, memory, devices, predecessors) at 4, 6 and 8 devices.
TEST(PlacementsTest, MatchTesselDumps) {
  int compared = 0;
  for (int devices : {4, 6, 8}) {
    auto text = ir::ReadTextFile(TestData("placements_D" + std::to_string(devices) + ".json"));
    ASSERT_TRUE(text.ok()) << text.status();
    const ir::Json dump = ir::Json::parse(*text);
    for (const ir::Json& p : dump) {
      const std::string name = p["name"].get<std::string>();
      const bool train = p["train"].get<bool>();
      SCOPED_TRACE(name + (train ? " train " : " infer ") + std::to_string(devices));
      auto model = MakePlacement(name, devices, !train);
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_TRUE(ValidateBlockModel(*model).ok());
      ASSERT_EQ(model->num_blocks(), static_cast<int>(p["blocks"].size()));
      for (const ir::Json& jb : p["blocks"]) {
        const Block& b = model->blocks[jb["gid"].get<int>()];
        SCOPED_TRACE(b.name);
        EXPECT_EQ(b.span, jb["span"].get<int64_t>());
        EXPECT_EQ(b.memory, jb["mem"].get<int64_t>());
        EXPECT_EQ(b.devices, jb["devs"].get<std::vector<int>>());
        EXPECT_EQ(b.kind == BlockKind::kForward, jb["btype"].get<std::string>() == "forward");
        std::set<int> preds;
        for (const Dep& d : b.preds) preds.insert(d.block);
        const auto want = jb["preds"].get<std::vector<int>>();
        EXPECT_EQ(preds, std::set<int>(want.begin(), want.end()));
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 40);
}

}  // namespace
}  // namespace loom::schedule
