#include "transform/conversion.h"

#include "gtest/gtest.h"

namespace loom::transform {
namespace {

PartitionSpec Grid(int64_t dp, int64_t tp, bool factored = false) {
  PartitionSpec p;
  p.mesh = ir::Mesh({{"dp", dp}, {"pp", 1}, {"tp", tp}});
  p.grid_axes = {0, 2};
  p.pp_axis = 1;
  p.nest_order = {1, 0};
  p.factored = factored;
  return p;
}

const AxisLayout kR{};
const AxisLayout kP{AxisKind::kPartial, -1};
AxisLayout S(int d) { return {AxisKind::kSharded, d}; }
const ir::TensorType kType{ir::Shape({8, 16, 32}), ir::DType::kF32};

std::vector<ConversionStep> Path(const Layout& from, const Layout& want,
                                 const PartitionSpec& p = Grid(2, 4)) {
  auto path = CheapestConversion(kType, from, want, p);
  EXPECT_TRUE(path.ok()) << path.status();
  return path.ok() ? *path : std::vector<ConversionStep>{};
}

// Partial sums become whole by one all-reduce over the partial axis.
TEST(ConversionTest, PartialToReplicatedIsOneAllReduce) {
  auto path = Path({kR, kP}, {kR, kR});
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(path[0].collective, ir::CollectiveKind::kAllReduce);
  EXPECT_EQ(path[0].axis, 1);
}

// Partial sums wanted sharded are reduce-scattered (sequence parallelism's exit).
TEST(ConversionTest, PartialToShardedIsReduceScatter) {
  auto path = Path({kR, kP}, {kR, S(1)});
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(path[0].collective, ir::CollectiveKind::kReduceScatter);
  EXPECT_EQ(path[0].dim, 1);
}

// Shards along one dim become shards along another by an all-to-all.
TEST(ConversionTest, ReshardIsAllToAll) {
  auto path = Path({kR, S(1)}, {kR, S(2)});
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(path[0].collective, ir::CollectiveKind::kAllToAll);
  EXPECT_EQ(path[0].dim, 2);
  EXPECT_EQ(path[0].dim2, 1);
}

// A replicated value is sharded locally, with no communication.
TEST(ConversionTest, ReplicatedToShardedIsALocalSlice) {
  auto path = Path({kR, kR}, {S(0), S(1)});
  ASSERT_EQ(path.size(), 2u);
  for (const auto& s : path) EXPECT_EQ(s.kind, ConversionKind::kSlice);
}

// Both axes change: each gets its own step, and no dim is sharded twice.
TEST(ConversionTest, TwoAxesConvertIndependently) {
  auto path = Path({kP, S(0)}, {kR, kR});
  ASSERT_EQ(path.size(), 2u);
  EXPECT_NE(path[0].axis, path[1].axis);
}

// Replicas become partial sums by a zero split, never over dp.
TEST(ConversionTest, ZeroSplitNeverOnDp) {
  auto path = Path({kR, kR}, {kR, kP});
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(path[0].kind, ConversionKind::kZeroSplit);
  EXPECT_FALSE(CheapestConversion(kType, {kR, kR}, {kP, kR}, Grid(2, 4)).ok());
  EXPECT_FALSE(CheapestConversion(kType, {kR, kR}, {kP, kR}, Grid(2, 4, true)).ok());
}

// Links inside a node are priced faster than links across nodes.
TEST(ConversionTest, TensorParallelLinksAreFaster) {
  EXPECT_GT(LinkOf("tp").bytes_per_second, LinkOf("dp").bytes_per_second);
  auto tp = Path({kR, kP}, {kR, kR});
  auto dp = Path({kP, kR}, {kR, kR});
  ASSERT_EQ(tp.size(), 1u);
  ASSERT_EQ(dp.size(), 1u);
  EXPECT_LT(tp[0].seconds, dp[0].seconds);
}

}  // namespace
}  // namespace loom::transform
