// Elementwise ops: fill's constant output and its pieces.

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/op_schema.h"
#include "ir/plan.h"
#include "tests/ir/op_samples.h"
#include "tests/ir/op_test_util.h"

namespace loom::ir {
namespace {

using ::loom::ir::testing::F64;
using ::loom::ir::testing::InferError;
using ::loom::ir::testing::Run1;

// fill writes `value` everywhere in a tensor of `shape` and `dtype`.
TEST(FillTest, WritesTheValueEverywhere) {
  HostTensor y = Run1(
      OpKind::kFill, {},
      {{"shape", std::vector<int64_t>{2, 3}}, {"value", -1.25}, {"dtype", std::string("f64")}});
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.dtype, DType::kF64);
  EXPECT_EQ(y.data, std::vector<double>(6, -1.25));
  EXPECT_EQ(InferError(OpKind::kFill, {}, {{"shape", std::vector<int64_t>{2, -3}}, {"value", 0.0}})
                .message(),
            "attribute 'shape' has a negative dim");
}

// A piece of fill writes its output box: `shape` becomes the box's dims, value and
// dtype are kept, and running the piece gives the box of the full result.
TEST(FillTest, ShardAttrsShapeThePieceLikeItsOutputBox) {
  const OpSchema& schema = GetOpSchema(OpKind::kFill);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const AttrMap attrs{
      {"shape", std::vector<int64_t>{4, 6}}, {"value", 0.5}, {"dtype", std::string("f32")}};
  auto piece = schema.shard_attrs(attrs, {}, {}, {TensorType{Shape({4, 6}), DType::kF32}},
                                  {Box{{2, 4}, {0, 3}}});
  ASSERT_TRUE(piece.ok()) << piece.status();
  EXPECT_EQ(piece->ToString(), "{dtype=\"f32\", shape=[2,3], value=0.5}");
  HostTensor y = Run1(OpKind::kFill, {}, *piece);
  EXPECT_EQ(y.shape.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.dtype, DType::kF32);
  EXPECT_EQ(y.data, std::vector<double>(6, 0.5));
}

// A box list that does not match the output is an error, not a guess.
TEST(FillTest, ShardAttrsRejectBoxesThatDoNotFitTheOutput) {
  const OpSchema& schema = GetOpSchema(OpKind::kFill);
  ASSERT_NE(schema.shard_attrs, nullptr);
  const AttrMap attrs{{"shape", std::vector<int64_t>{4}}, {"value", 1.0}};
  const std::vector<TensorType> out = {F64({4})};
  EXPECT_FALSE(schema.shard_attrs(attrs, {}, {}, out, {}).ok());
  EXPECT_EQ(schema.shard_attrs(attrs, {}, {}, out, {Box{{0, 2}, {0, 1}}}).status().message(),
            "fill piece needs one output box of 1 dims");
}

}  // namespace
}  // namespace loom::ir
