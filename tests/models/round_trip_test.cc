// Every model's training graph survives the text and JSON formats unchanged.

#include <string>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/json_format.h"
#include "ir/text_format.h"
#include "models/models.h"

namespace loom::models {
namespace {

struct Case {
  std::string model;
  bool tiny;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const auto& info : ListModels()) {
    cases.push_back({info.name, true});
    cases.push_back({info.name, false});
  }
  return cases;
}

class RoundTripTest : public ::testing::TestWithParam<Case> {
 protected:
  ir::Graph TrainingStep() {
    ModelOptions options;
    options.tiny = GetParam().tiny;
    // Full-size graphs keep their real dims; four layers keep the text small while
    // every kind of block (DeepSeek-V3's three dense layers and an MoE one) appears.
    if (!options.tiny) options.layers = 4;
    auto forward = BuildForward(GetParam().model, options);
    EXPECT_TRUE(forward.ok()) << forward.status();
    ir::TrainingOptions training;
    training.microbatches = 2;
    auto step = ir::BuildTrainingStep(*forward, training);
    EXPECT_TRUE(step.ok()) << step.status();
    return *std::move(step);
  }
};

// parse(print(g)) == g for the whole training step.
TEST_P(RoundTripTest, TextFormatIsIdentity) {
  ir::Graph g = TrainingStep();
  std::string text = ir::PrintGraph(g);
  auto parsed = ir::ParseGraph(text, GetParam().model + ".loom");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(*parsed == g);
  EXPECT_EQ(ir::PrintGraph(*parsed), text);
}

// GraphFromJson(GraphToJson(g)) == g for the whole training step.
TEST_P(RoundTripTest, JsonFormatIsIdentity) {
  ir::Graph g = TrainingStep();
  auto parsed = ir::GraphFromJson(ir::GraphToJson(g), GetParam().model + ".json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(*parsed == g);
}

INSTANTIATE_TEST_SUITE_P(EveryModel, RoundTripTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.model + (info.param.tiny ? "_tiny" : "_full");
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace loom::models
