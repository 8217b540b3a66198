// Graph invariants the verifier relies on, and the attribute map.

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ir/attributes.h"
#include "ir/graph.h"

namespace loom::ir {
namespace {

// Output types come from the op's inference when it is added and never change:
// only the names of a tensor's dims may be set afterwards.
TEST(GraphTest, DimNamesChangeButDimsDoNot) {
  Graph g("g");
  TensorId x = *g.AddInput("x", Shape{2, 3}, DType::kF32, TensorRole::kInput);
  TensorId y = (*g.AddOp(OpKind::kScale, {x}, {{"factor", 2.0}}, {}, {{"y"}}))[0];
  Shape named = g.tensor(y).shape;
  named.set_dim_name(0, "rows");
  EXPECT_TRUE(g.SetDimNames(y, named));
  EXPECT_EQ(g.tensor(y).shape.names()[0], "rows");
  EXPECT_FALSE(g.SetDimNames(y, Shape{4, 3}));
  EXPECT_EQ(g.tensor(y).shape.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.tensor(y).shape.names()[0], "rows");
}

// UniqueName gives the base when free, else the first free "base.k" (k >= 2),
// also after many reuses and around names added by hand.
TEST(GraphTest, UniqueNameTakesTheFirstFreeSuffix) {
  Graph g("g");
  auto add = [&](const std::string& name) {
    ASSERT_TRUE(g.AddInput(name, Shape({1}), DType::kF32, TensorRole::kInput).ok()) << name;
  };
  EXPECT_EQ(g.UniqueName("x"), "x");
  add("x");
  for (int k = 2; k <= 1000; ++k) {
    const std::string name = g.UniqueName("x");
    ASSERT_EQ(name, "x." + std::to_string(k));
    add(name);
  }
  add("x.1002");
  EXPECT_EQ(g.UniqueName("x"), "x.1001");
  add("x.1001");
  EXPECT_EQ(g.UniqueName("x"), "x.1003");
  EXPECT_EQ(g.UniqueName("y"), "y");
  Graph copy = g;
  EXPECT_EQ(copy.UniqueName("x"), "x.1003");
}

TEST(AttrMapTest, SortedByNameAndFoundByName) {
  AttrMap a{{"size", int64_t{4}}, {"dim", int64_t{1}}, {"dim", int64_t{7}}};
  ASSERT_EQ(a.values().size(), 2u);
  EXPECT_EQ(a.values()[0].first, "dim");
  EXPECT_EQ(*a.GetInt("dim"), 1);  // the first of a repeated name
  a.Set("begin", int64_t{0});
  a.Set("size", int64_t{5});
  EXPECT_EQ(a.ToString(), "{begin=0, dim=1, size=5}");
  EXPECT_EQ(a.Find("missing"), nullptr);
  EXPECT_FALSE(a.Has("siz"));
  EXPECT_FALSE(a.GetInt("missing").ok());
  AttrMap b;
  b.Set("size", int64_t{5});
  b.Set("dim", int64_t{1});
  b.Set("begin", int64_t{0});
  EXPECT_EQ(a, b);
  b.Set("dim", 1.0);
  EXPECT_NE(a, b);
  EXPECT_EQ(*b.GetFloat("dim"), 1.0);
}

}  // namespace
}  // namespace loom::ir
