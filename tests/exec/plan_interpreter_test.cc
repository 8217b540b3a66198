#include "exec/plan_interpreter.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/interpreter.h"
#include "ir/plan.h"

namespace loom::exec {
namespace {

using ir::Box;
using ir::CollectiveKind;
using ir::DType;
using ir::HostTensor;
using ir::OpKind;
using ir::PlanStep;
using ir::TensorId;
using ir::TensorRole;
using ir::ValueId;
using ir::ValuePart;

constexpr int64_t kRows = 4;
constexpr int64_t kIn = 6;
constexpr int64_t kOut = 8;

// x [4,6] (input) -> linear with w [8,6] (parameter) -> y [4,8] -> exp -> z [4,8].
struct LinearSpec {
  ir::Graph graph{"linear"};
  TensorId x = ir::kNoId;
  TensorId w = ir::kNoId;
  TensorId y = ir::kNoId;
  TensorId z = ir::kNoId;
};

LinearSpec MakeLinearSpec() {
  LinearSpec s;
  s.x = *s.graph.AddInput("x", ir::Shape({kRows, kIn}), DType::kF64, TensorRole::kInput);
  s.w = *s.graph.AddInput("w", ir::Shape({kOut, kIn}), DType::kF64, TensorRole::kParameter);
  s.y = (*s.graph.AddOp(OpKind::kLinear, {s.x, s.w}, {}, ir::OpInfo{}, {{"y"}}))[0];
  s.z = (*s.graph.AddOp(OpKind::kExp, {s.y}, {}, ir::OpInfo{}, {{"z"}}))[0];
  s.graph.AddOutput(s.z);
  return s;
}

HostTensor Random(ir::Shape shape, uint64_t seed) {
  HostTensor t(std::move(shape), DType::kF64);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (double& v : t.data) v = dist(rng);
  return t;
}

absl::flat_hash_map<TensorId, HostTensor> LinearFeeds(const LinearSpec& s) {
  absl::flat_hash_map<TensorId, HostTensor> feeds;
  feeds[s.x] = Random(ir::Shape({kRows, kIn}), 1);
  feeds[s.w] = Random(ir::Shape({kOut, kIn}), 2);
  return feeds;
}

// y[r][o] = sum_i x[r][i] * w[o][i], written out independently of the kernels.
HostTensor NaiveLinear(const HostTensor& x, const HostTensor& w) {
  HostTensor y(ir::Shape({kRows, kOut}), DType::kF64);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      for (int64_t i = 0; i < kIn; ++i) y[r * kOut + o] += x[r * kIn + i] * w[o * kIn + i];
    }
  }
  return y;
}

// Rows [r0, r1) and columns [c0, c1) of a matrix.
HostTensor Block(const HostTensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t cols = t.shape.dim(1);
  HostTensor out(ir::Shape({r1 - r0, c1 - c0}), t.dtype);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) out[(r - r0) * (c1 - c0) + (c - c0)] = t[r * cols + c];
  }
  return out;
}

// Largest |a - b|; infinite when the shapes differ.
double MaxDiff(const HostTensor& a, const HostTensor& b) {
  if (a.shape.dims() != b.shape.dims()) return INFINITY;
  double m = 0.0;
  for (int64_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Builds small plans by hand on a one-axis mesh.
class PlanBuilder {
 public:
  explicit PlanBuilder(int64_t devices) {
    plan_.mesh = ir::Mesh({ir::MeshAxis{"tp", devices}});
  }

  ValueId Value(int64_t device, TensorId tensor, Box box, ValuePart part = ValuePart::Full(),
                DType dtype = DType::kF64) {
    ir::PlanValue v;
    v.id = static_cast<ValueId>(plan_.values.size());
    v.device = device;
    v.sub = ir::SubTensor{tensor, std::move(box), std::move(part)};
    v.dtype = dtype;
    plan_.values.push_back(std::move(v));
    return plan_.values.back().id;
  }

  int Task(int64_t device, OpKind kind, std::vector<ValueId> inputs,
           std::vector<ValueId> outputs, ir::AttrMap attrs = {}) {
    ir::Task t;
    t.id = static_cast<int>(plan_.tasks.size());
    t.kind = kind;
    t.device = device;
    t.attrs = std::move(attrs);
    t.inputs = std::move(inputs);
    t.outputs = std::move(outputs);
    plan_.tasks.push_back(std::move(t));
    return plan_.tasks.back().id;
  }

  int Collective(CollectiveKind kind, std::vector<int64_t> devices, std::vector<ValueId> inputs,
                 std::vector<ValueId> outputs, int dim = -1, int dim2 = -1) {
    ir::Collective c;
    c.id = static_cast<int>(plan_.collectives.size());
    c.kind = kind;
    c.devices = std::move(devices);
    c.inputs = std::move(inputs);
    c.outputs = std::move(outputs);
    c.dim = dim;
    c.dim2 = dim2;
    plan_.collectives.push_back(std::move(c));
    return plan_.collectives.back().id;
  }

  ir::Plan& plan() { return plan_; }

 private:
  ir::Plan plan_;
};

const Box kFullX = {{0, kRows}, {0, kIn}};
const Box kFullW = {{0, kOut}, {0, kIn}};
const Box kFullY = {{0, kRows}, {0, kOut}};

// Tensor-parallel linear split by output features: device d holds w rows
// [4d, 4d+4) and computes y columns [4d, 4d+4); an all-gather along dim 1 (in
// `group` order) rebuilds y on both devices. Returns the gathered values.
std::pair<ValueId, ValueId> ColumnSplit(PlanBuilder& b, const LinearSpec& s,
                                        std::vector<int64_t> group = {0, 1}) {
  ValueId shard[2];
  for (int64_t d = 0; d < 2; ++d) {
    ValueId x = b.Value(d, s.x, kFullX);
    ValueId w = b.Value(d, s.w, {{4 * d, 4 * d + 4}, {0, kIn}});
    shard[d] = b.Value(d, s.y, {{0, kRows}, {4 * d, 4 * d + 4}});
    b.Task(d, OpKind::kLinear, {x, w}, {shard[d]});
  }
  ValueId out[2] = {b.Value(group[0], s.y, kFullY), b.Value(group[1], s.y, kFullY)};
  b.Collective(CollectiveKind::kAllGather, group, {shard[group[0]], shard[group[1]]},
               {out[0], out[1]}, /*dim=*/1);
  return {out[0], out[1]};
}

// Tensor-parallel linear split by input features: device d holds x and w columns
// [3d, 3d+3) and computes a partial sum of the whole y with part `parts[d]`.
std::pair<ValueId, ValueId> RowSplitPartials(PlanBuilder& b, const LinearSpec& s,
                                             std::vector<ValuePart> parts) {
  ValueId partial[2];
  for (int64_t d = 0; d < 2; ++d) {
    ValueId x = b.Value(d, s.x, {{0, kRows}, {3 * d, 3 * d + 3}});
    ValueId w = b.Value(d, s.w, {{0, kOut}, {3 * d, 3 * d + 3}});
    partial[d] = b.Value(d, s.y, kFullY, parts[d]);
    b.Task(d, OpKind::kLinear, {x, w}, {partial[d]});
  }
  return {partial[0], partial[1]};
}

std::vector<ValuePart> Shares() {
  return {ValuePart::Full().Share(0, 2), ValuePart::Full().Share(1, 2)};
}

// Column-split linear plus all-gather reproduces y on both devices, and each shard
// holds its own columns.
TEST(PlanInterpreterTest, ColumnSplitWithAllGatherReproducesLinear) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  auto [y0, y1] = ColumnSplit(b, s);
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  EXPECT_LE(MaxDiff((*values)[y0], y), 1e-12);
  EXPECT_LE(MaxDiff((*values)[y1], y), 1e-12);
  EXPECT_LE(MaxDiff((*values)[2], Block(y, 0, kRows, 0, 4)), 1e-12);   // device 0's shard
  EXPECT_LE(MaxDiff((*values)[5], Block(y, 0, kRows, 4, 8)), 1e-12);   // device 1's shard
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/3);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 8);
  EXPECT_EQ(report->values_partial, 0);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// Row-split linear gives partial sums whose all-reduce is y; the partials are
// counted, not checked.
TEST(PlanInterpreterTest, RowSplitPartialSumsWithAllReduceReproduceLinear) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  auto [p0, p1] = RowSplitPartials(b, s, Shares());
  ValueId y0 = b.Value(0, s.y, kFullY);
  ValueId y1 = b.Value(1, s.y, kFullY);
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {p0, p1}, {y0, y1});
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  HostTensor sum = (*values)[p0];
  for (int64_t i = 0; i < sum.size(); ++i) sum[i] += (*values)[p1][i];
  EXPECT_LE(MaxDiff(sum, y), 1e-12);
  EXPECT_GT(MaxDiff((*values)[p0], y), 1e-3);  // a partial is not the whole sum
  EXPECT_LE(MaxDiff((*values)[y0], y), 1e-12);
  EXPECT_LE(MaxDiff((*values)[y1], y), 1e-12);
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/3);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 6);
  EXPECT_EQ(report->values_partial, 2);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// Reduce-scatter along dim 0 leaves device i rows [2i, 2i+2) of the sum.
TEST(PlanInterpreterTest, ReduceScatterLeavesEachDeviceItsRowsOfTheSum) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  auto [p0, p1] = RowSplitPartials(b, s, Shares());
  ValueId r0 = b.Value(0, s.y, {{0, 2}, {0, kOut}});
  ValueId r1 = b.Value(1, s.y, {{2, 4}, {0, kOut}});
  b.Collective(CollectiveKind::kReduceScatter, {0, 1}, {p0, p1}, {r0, r1}, /*dim=*/0);
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  EXPECT_LE(MaxDiff((*values)[r0], Block(y, 0, 2, 0, kOut)), 1e-12);
  EXPECT_LE(MaxDiff((*values)[r1], Block(y, 2, 4, 0, kOut)), 1e-12);
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/4);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 6);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// All-to-all (split dim 0, concatenate dim 1) turns column shards of y into row shards.
TEST(PlanInterpreterTest, AllToAllTurnsColumnShardsIntoRowShards) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  ColumnSplit(b, s);
  const ValueId shard0 = 2;
  const ValueId shard1 = 5;
  ValueId r0 = b.Value(0, s.y, {{0, 2}, {0, kOut}});
  ValueId r1 = b.Value(1, s.y, {{2, 4}, {0, kOut}});
  b.Collective(CollectiveKind::kAllToAll, {0, 1}, {shard0, shard1}, {r0, r1}, /*dim=*/0,
               /*dim2=*/1);
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  EXPECT_LE(MaxDiff((*values)[r0], Block(y, 0, 2, 0, kOut)), 1e-12);
  EXPECT_LE(MaxDiff((*values)[r1], Block(y, 2, 4, 0, kOut)), 1e-12);
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/5);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 10);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// Pipeline of two stages: device 0 computes y, send/recv moves it to device 1,
// which computes z = exp(y); it runs with and without a device order.
TEST(PlanInterpreterTest, SendRecvMovesAValueToTheNextStage) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  ValueId x = b.Value(0, s.x, kFullX);
  ValueId w = b.Value(0, s.w, kFullW);
  ValueId y0 = b.Value(0, s.y, kFullY);
  ValueId y1 = b.Value(1, s.y, kFullY);
  ValueId z1 = b.Value(1, s.z, kFullY);
  int linear = b.Task(0, OpKind::kLinear, {x, w}, {y0});
  int exp = b.Task(1, OpKind::kExp, {y1}, {z1});
  int send = b.Collective(CollectiveKind::kSendRecv, {0, 1}, {y0}, {y1});
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  HostTensor z = y;
  for (double& v : z.data) v = std::exp(v);
  for (bool ordered : {false, true}) {
    if (ordered) {
      b.plan().order = {{PlanStep{false, linear}, PlanStep{true, send}},
                        {PlanStep{true, send}, PlanStep{false, exp}}};
    }
    auto values = RunPlan(s.graph, b.plan(), feeds);
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_LE(MaxDiff((*values)[y1], y), 1e-12);
    EXPECT_LE(MaxDiff((*values)[z1], z), 1e-12);
  }
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/6);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 5);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// Broadcast copies x, present only on device 0, to both devices, which then run
// the column-split linear.
TEST(PlanInterpreterTest, BroadcastCopiesTheRootValueToEveryDevice) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  ValueId root = b.Value(0, s.x, kFullX);
  ValueId x[2] = {b.Value(0, s.x, kFullX), b.Value(1, s.x, kFullX)};
  b.Collective(CollectiveKind::kBroadcast, {0, 1}, {root}, {x[0], x[1]});
  ValueId shard[2];
  for (int64_t d = 0; d < 2; ++d) {
    ValueId w = b.Value(d, s.w, {{4 * d, 4 * d + 4}, {0, kIn}});
    shard[d] = b.Value(d, s.y, {{0, kRows}, {4 * d, 4 * d + 4}});
    b.Task(d, OpKind::kLinear, {x[d], w}, {shard[d]});
  }
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[x[1]].data, feeds[s.x].data);
  const HostTensor y = NaiveLinear(feeds[s.x], feeds[s.w]);
  EXPECT_LE(MaxDiff((*values)[shard[1]], Block(y, 0, kRows, 4, 8)), 1e-12);
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/7);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 7);
  EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
}

// All-reduce with max takes the elementwise maximum of the inputs.
TEST(PlanInterpreterTest, AllReduceMaxTakesTheElementwiseMaximum) {
  LinearSpec s = MakeLinearSpec();
  auto feeds = LinearFeeds(s);
  PlanBuilder b(2);
  ValueId a = b.Value(0, s.w, {{0, 4}, {0, kIn}});
  ValueId c = b.Value(1, s.w, {{4, 8}, {0, kIn}});
  ValueId out0 = b.Value(0, s.w, {{0, 4}, {0, kIn}});
  ValueId out1 = b.Value(1, s.w, {{4, 8}, {0, kIn}});
  int id = b.Collective(CollectiveKind::kAllReduce, {0, 1}, {a, c}, {out0, out1});
  b.plan().collectives[id].reduce = ir::ReduceOp::kMax;
  auto values = RunPlan(s.graph, b.plan(), feeds);
  ASSERT_TRUE(values.ok()) << values.status();
  HostTensor expected = Block(feeds[s.w], 0, 4, 0, kIn);
  const HostTensor lower = Block(feeds[s.w], 4, 8, 0, kIn);
  for (int64_t i = 0; i < expected.size(); ++i) expected[i] = std::max(expected[i], lower[i]);
  EXPECT_EQ((*values)[out0].data, expected.data);
  EXPECT_EQ((*values)[out1].data, expected.data);
}

// Dropping the all-reduce and claiming a partial sum is the whole of y is caught.
TEST(PlanInterpreterTest, MissingAllReduceGivesLargeError) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(2);
  RowSplitPartials(b, s, {ValuePart::Full(), ValuePart::Full()});
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/3);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_partial, 0);
  EXPECT_GT(report->max_rel_error_all, 0.1);
  EXPECT_NE(report->worst.find("'y'"), std::string::npos) << report->worst;
}

// An all-gather over the group in the wrong order swaps the column blocks of y.
TEST(PlanInterpreterTest, AllGatherInWrongGroupOrderGivesLargeError) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(2);
  ColumnSplit(b, s, /*group=*/{1, 0});
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/3);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->max_rel_error_all, 0.1);
  EXPECT_NE(report->worst.find("'y' [0:4,0:8]"), std::string::npos) << report->worst;
}

// Row-parallel data split where each device slices its rows of x: taking device
// 1's rows at the wrong offset is caught, the right offset is exact.
TEST(PlanInterpreterTest, SliceAtWrongOffsetGivesLargeError) {
  LinearSpec s = MakeLinearSpec();
  for (int64_t begin : {2, 0}) {
    PlanBuilder b(2);
    for (int64_t d = 0; d < 2; ++d) {
      ValueId x = b.Value(d, s.x, kFullX);
      ValueId w = b.Value(d, s.w, kFullW);
      ValueId rows = b.Value(d, s.x, {{2 * d, 2 * d + 2}, {0, kIn}});
      ValueId y = b.Value(d, s.y, {{2 * d, 2 * d + 2}, {0, kOut}});
      const int64_t start = d == 1 ? begin : 0;
      b.Task(d, OpKind::kSlice, {x}, {rows},
             {{"dim", int64_t{0}}, {"begin", start}, {"end", start + 2}});
      b.Task(d, OpKind::kLinear, {rows, w}, {y});
    }
    auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/8);
    ASSERT_TRUE(report.ok()) << report.status();
    if (begin == 2) {
      EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
    } else {
      EXPECT_GT(report->max_rel_error_all, 0.1);
      EXPECT_NE(report->worst.find("device 1"), std::string::npos) << report->worst;
    }
  }
}

// Slicing w along the wrong dim makes the task's inferred shape disagree with its
// claim: an error naming the task, not a crash.
TEST(PlanInterpreterTest, SliceOnWrongDimIsAnErrorNamingTheTask) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(1);
  ValueId w = b.Value(0, s.w, kFullW);
  ValueId half = b.Value(0, s.w, {{0, 4}, {0, kIn}});
  b.Task(0, OpKind::kSlice, {w}, {half}, {{"dim", int64_t{1}}, {"begin", int64_t{0}},
                                          {"end", int64_t{4}}});
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_EQ(values.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(values.status().message().find("task 0 (device 0, slice)"), std::string::npos)
      << values.status();
  EXPECT_NE(values.status().message().find("[8,4]"), std::string::npos) << values.status();
}

// A value claiming the empty part must hold zeros: an input so claimed is zeros,
// a computed one that is not zero is a large error.
TEST(PlanInterpreterTest, EmptyPartValuesMustHoldZeros) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(2);
  ValueId zero = b.Value(0, s.w, kFullW, ValuePart::Empty());
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[zero].data, std::vector<double>(kOut * kIn, 0.0));
  auto report = CheckPlanNumerics(s.graph, b.plan(), /*seed=*/9);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_checked, 1);
  EXPECT_EQ(report->max_rel_error_all, 0.0);

  PlanBuilder wrong(2);
  RowSplitPartials(wrong, s, {ValuePart::Full().Share(0, 2), ValuePart::Empty()});
  report = CheckPlanNumerics(s.graph, wrong.plan(), /*seed=*/9);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_partial, 1);
  EXPECT_GT(report->max_rel_error_all, 0.1);
  EXPECT_NE(report->worst.find("device 1"), std::string::npos) << report->worst;
}

// d = sum(x) - sum(x) is exactly zero in the reference; a plan summing the first
// sum in two halves leaves rounding noise in d, which the report does not count
// as an error (it is measured against the role class's scale, not against zero).
TEST(PlanInterpreterTest, RoundingNoiseOnAnExactZeroIsNotAnError) {
  ir::Graph g("zero");
  TensorId x = *g.AddInput("x", ir::Shape({64}), DType::kF64, TensorRole::kInput);
  const ir::AttrMap all = {{"dims", std::vector<int64_t>{0}}};
  TensorId s1 = (*g.AddOp(OpKind::kSum, {x}, all, ir::OpInfo{}, {{"s1"}}))[0];
  TensorId s2 = (*g.AddOp(OpKind::kSum, {x}, all, ir::OpInfo{}, {{"s2"}}))[0];
  TensorId d = (*g.AddOp(OpKind::kSub, {s1, s2}, {}, ir::OpInfo{}, {{"d"}}))[0];
  g.AddOutput(d);
  PlanBuilder b(2);
  ValueId halves[2];
  for (int64_t dev = 0; dev < 2; ++dev) {
    ValueId half = b.Value(dev, x, {{32 * dev, 32 * dev + 32}});
    halves[dev] = b.Value(dev, s1, {}, ValuePart::Full().Share(dev, 2));
    b.Task(dev, OpKind::kSum, {half}, {halves[dev]}, all);
  }
  ValueId s1_0 = b.Value(0, s1, {});
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {halves[0], halves[1]},
               {s1_0, b.Value(1, s1, {})});
  ValueId s2_0 = b.Value(0, s2, {});
  b.Task(0, OpKind::kSum, {b.Value(0, x, {{0, 64}})}, {s2_0}, all);
  ValueId d0 = b.Value(0, d, {});
  b.Task(0, OpKind::kSub, {s1_0, s2_0}, {d0});

  // The first seed whose halves round differently from the whole sum.
  uint64_t seed = 0;
  double noise = 0.0;
  while (noise == 0.0 && seed < 100) {
    auto values = RunPlan(g, b.plan(), ir::RandomFeeds(g, ++seed));
    ASSERT_TRUE(values.ok()) << values.status();
    noise = (*values)[d0][0];
  }
  ASSERT_NE(noise, 0.0);
  EXPECT_LT(std::abs(noise), 1e-14);
  auto report = CheckPlanNumerics(g, b.plan(), seed);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->values_partial, 2);
  EXPECT_LE(report->max_rel_error_all, 1e-9) << report->worst;
}

// A plan input holding a partial sum cannot be fed: the error names the value.
TEST(PlanInterpreterTest, RejectsInputWithPartialPart) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(1);
  b.Value(0, s.x, kFullX);
  b.Value(0, s.w, kFullW, ValuePart::Full().Share(1, 2));
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("value 1 (device 0, 'w'"), std::string::npos)
      << values.status();
}

// Inconsistent shapes in a collective are an error naming the collective.
TEST(PlanInterpreterTest, CollectiveShapeMismatchIsAnErrorNamingIt) {
  LinearSpec s = MakeLinearSpec();
  {
    PlanBuilder b(2);
    ValueId a = b.Value(0, s.w, kFullW);
    ValueId c = b.Value(1, s.w, {{0, 4}, {0, kIn}});
    b.Collective(CollectiveKind::kAllReduce, {0, 1}, {a, c},
                 {b.Value(0, s.w, kFullW), b.Value(1, s.w, kFullW)});
    auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
    ASSERT_FALSE(values.ok());
    EXPECT_NE(values.status().message().find("collective 0 (all_reduce over devices 0,1)"),
              std::string::npos)
        << values.status();
  }
  {
    // 8 rows do not split into 3 equal chunks.
    PlanBuilder b(3);
    std::vector<ValueId> in, out;
    for (int64_t d = 0; d < 3; ++d) in.push_back(b.Value(d, s.w, kFullW));
    for (int64_t d = 0; d < 3; ++d) out.push_back(b.Value(d, s.w, {{0, 2}, {0, kIn}}));
    b.Collective(CollectiveKind::kReduceScatter, {0, 1, 2}, in, out, /*dim=*/0);
    auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
    ASSERT_FALSE(values.ok());
    EXPECT_NE(values.status().message().find("collective 0 (reduce_scatter"), std::string::npos)
        << values.status();
    EXPECT_NE(values.status().message().find("3 equal chunks"), std::string::npos)
        << values.status();
  }
  {
    // The gathered shape disagrees with the output's box.
    PlanBuilder b(2);
    ValueId a = b.Value(0, s.w, {{0, 4}, {0, kIn}});
    ValueId c = b.Value(1, s.w, {{4, 8}, {0, kIn}});
    b.Collective(CollectiveKind::kAllGather, {0, 1}, {a, c},
                 {b.Value(0, s.w, kFullW), b.Value(1, s.w, kFullW)}, /*dim=*/1);
    auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
    ASSERT_FALSE(values.ok());
    EXPECT_NE(values.status().message().find("collective 0 (all_gather"), std::string::npos)
        << values.status();
    EXPECT_NE(values.status().message().find("[4,12]"), std::string::npos) << values.status();
  }
}

// A task reading a value that lives on another device is rejected.
TEST(PlanInterpreterTest, RejectsTaskReadingAnotherDevicesValue) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(2);
  ValueId x = b.Value(0, s.x, kFullX);
  ValueId w = b.Value(1, s.w, kFullW);
  b.Task(0, OpKind::kLinear, {x, w}, {b.Value(0, s.y, kFullY)});
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("task 0 (device 0, linear): input 1"),
            std::string::npos)
      << values.status();
}

// RunPlan takes explicit plans only.
TEST(PlanInterpreterTest, RejectsFactoredPlan) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(1);
  b.plan().factoring = ir::Factoring{};
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("ExpandPlan"), std::string::npos) << values.status();
}

// Two tasks feeding each other never become ready: reported, not hung.
TEST(PlanInterpreterTest, ReportsDataflowCycle) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(1);
  ValueId y = b.Value(0, s.y, kFullY);
  ValueId z = b.Value(0, s.z, kFullY);
  b.Task(0, OpKind::kExp, {y}, {z});
  b.Task(0, OpKind::kExp, {z}, {y});
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("2 steps never become ready"), std::string::npos)
      << values.status();
}

// Row-split plan with two collectives: the partial-sum all-reduce (collective 0)
// and an all-gather of x's column shards (collective 1).
PlanBuilder TwoCollectivePlan(const LinearSpec& s) {
  PlanBuilder b(2);
  auto [p0, p1] = RowSplitPartials(b, s, Shares());
  b.Collective(CollectiveKind::kAllReduce, {0, 1}, {p0, p1},
               {b.Value(0, s.y, kFullY), b.Value(1, s.y, kFullY)});
  b.Collective(CollectiveKind::kAllGather, {0, 1}, {0, 3},
               {b.Value(0, s.x, kFullX), b.Value(1, s.x, kFullX)}, /*dim=*/1);
  return b;
}

// Devices entering two collectives in opposite orders deadlock: the error names
// both devices and the collective each waits at; the consistent order runs.
TEST(PlanInterpreterTest, ReportsDeadlockingOrder) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b = TwoCollectivePlan(s);
  const PlanStep t0{false, 0}, t1{false, 1}, c0{true, 0}, c1{true, 1};
  b.plan().order = {{t0, c0, c1}, {t1, c0, c1}};
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_TRUE(values.ok()) << values.status();

  b.plan().order = {{t0, c0, c1}, {t1, c1, c0}};
  values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  const std::string message(values.status().message());
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("device 0 waits at collective 0 (all_reduce over devices 0,1)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("device 1 waits at collective 1 (all_gather over devices 0,1)"),
            std::string::npos)
      << message;
}

// A device ordered to send a value before computing it deadlocks on the data
// dependency; the error names the value and its producer.
TEST(PlanInterpreterTest, ReportsOrderReadingAValueBeforeItsProducer) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b(2);
  ValueId y0 = b.Value(0, s.y, kFullY);
  ValueId y1 = b.Value(1, s.y, kFullY);
  int linear = b.Task(0, OpKind::kLinear, {b.Value(0, s.x, kFullX), b.Value(0, s.w, kFullW)},
                      {y0});
  int send = b.Collective(CollectiveKind::kSendRecv, {0, 1}, {y0}, {y1});
  b.plan().order = {{PlanStep{true, send}, PlanStep{false, linear}}, {PlanStep{true, send}}};
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  const std::string message(values.status().message());
  EXPECT_NE(message.find("device 0 waits at collective 0 (send_recv over devices 0,1), which "
                         "waits for value 0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("produced by task 0 (device 0, linear)"), std::string::npos) << message;
}

// An order that leaves a task out is rejected.
TEST(PlanInterpreterTest, RejectsOrderMissingATask) {
  LinearSpec s = MakeLinearSpec();
  PlanBuilder b = TwoCollectivePlan(s);
  const PlanStep t0{false, 0}, c0{true, 0}, c1{true, 1};
  b.plan().order = {{t0, c0, c1}, {c0, c1}};
  auto values = RunPlan(s.graph, b.plan(), LinearFeeds(s));
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("task 1 (device 1, linear): appears 0 times"),
            std::string::npos)
      << values.status();
}

constexpr int64_t kVocab = 7;
constexpr int64_t kHidden = 5;

// tokens -> embedding -> linear -> cross_entropy, two sequences of 3 tokens.
ir::Graph TinyForward() {
  ir::Graph g("tiny");
  TensorId tokens =
      *g.AddInput("tokens", ir::Shape({2, 3}), DType::kI64, TensorRole::kInput);
  TensorId targets =
      *g.AddInput("targets", ir::Shape({2, 3}), DType::kI64, TensorRole::kInput);
  TensorId table =
      *g.AddInput("embed", ir::Shape({kVocab, kHidden}), DType::kF64, TensorRole::kParameter);
  TensorId head =
      *g.AddInput("head", ir::Shape({kVocab, kHidden}), DType::kF64, TensorRole::kParameter);
  TensorId h = (*g.AddOp(OpKind::kEmbedding, {tokens, table}, {}, ir::OpInfo{}, {{"h"}}))[0];
  TensorId logits = (*g.AddOp(OpKind::kLinear, {h, head}, {}, ir::OpInfo{}, {{"logits"}}))[0];
  TensorId loss = (*g.AddOp(OpKind::kCrossEntropy, {logits, targets}, {}, ir::OpInfo{},
                            {{"loss", TensorRole::kLoss}}))[0];
  g.AddOutput(loss);
  return g;
}

// One device, one value per tensor (value id = tensor id), one task per op.
ir::Plan TrivialPlan(const ir::Graph& spec, bool ordered) {
  ir::Plan plan;
  plan.mesh = ir::Mesh({ir::MeshAxis{"dp", 1}});
  for (const ir::Tensor& t : spec.tensors()) {
    ir::PlanValue v;
    v.id = t.id;
    v.sub = ir::SubTensor{t.id, ir::FullBox(t.shape), ValuePart::Full()};
    v.dtype = t.dtype;
    plan.values.push_back(std::move(v));
  }
  plan.order.resize(ordered ? 1 : 0);
  for (const ir::Op& op : spec.ops()) {
    ir::Task task;
    task.id = op.id;
    task.op = op.id;
    task.kind = op.kind;
    task.attrs = op.attrs;
    task.info = op.info;
    task.inputs = op.inputs;
    task.outputs = op.outputs;
    plan.tasks.push_back(std::move(task));
    if (ordered) plan.order[0].push_back(PlanStep{false, op.id});
  }
  plan.outputs = spec.outputs();
  return plan;
}

// A whole training step (two micro-batches, AdamW) run as a one-device plan with a
// task per op reproduces the logical interpreter exactly, loss, gradients and
// updated parameters included.
TEST(PlanInterpreterTest, TrivialPlanOfTrainingStepMatchesReference) {
  ir::TrainingOptions options;
  options.microbatches = 2;
  auto spec = ir::BuildTrainingStep(TinyForward(), options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::flat_hash_map<std::string, int64_t> bounds = {{"tokens", kVocab}, {"targets", kVocab}};
  for (const ir::Tensor& t : spec->tensors()) {
    if (t.producer == ir::kNoId && !ir::IsFloat(t.dtype)) bounds[t.name] = kVocab;
  }
  const auto feeds = ir::RandomFeeds(*spec, /*seed=*/11, /*scale=*/0.5, bounds);
  auto reference = ir::Evaluate(*spec, feeds);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (bool ordered : {false, true}) {
    SCOPED_TRACE(ordered ? "ordered" : "dataflow");
    const ir::Plan plan = TrivialPlan(*spec, ordered);
    auto values = RunPlan(*spec, plan, feeds);
    ASSERT_TRUE(values.ok()) << values.status();
    ASSERT_EQ(values->size(), static_cast<size_t>(spec->num_tensors()));
    for (const ir::Tensor& t : spec->tensors()) {
      EXPECT_EQ((*values)[t.id].data, (*reference)[t.id]->data) << t.name;
    }
    auto report = CheckPlanNumerics(*spec, plan, /*seed=*/11);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->values_checked, spec->num_tensors());
    EXPECT_EQ(report->values_partial, 0);
    EXPECT_LE(report->max_rel_error_loss, 1e-12) << report->worst;
    EXPECT_LE(report->max_rel_error_gradients, 1e-12) << report->worst;
    EXPECT_LE(report->max_rel_error_parameters, 1e-12) << report->worst;
    EXPECT_LE(report->max_rel_error_all, 1e-12) << report->worst;
  }
}

// Perturbing one task of the training step (the learning rate of an AdamW update)
// shows up as a parameter error, not in the loss.
TEST(PlanInterpreterTest, WrongOptimizerTaskShowsAsParameterError) {
  ir::TrainingOptions options;
  options.microbatches = 2;
  auto spec = ir::BuildTrainingStep(TinyForward(), options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ir::Plan plan = TrivialPlan(*spec, /*ordered=*/false);
  bool changed = false;
  for (ir::Task& task : plan.tasks) {
    if (task.kind != OpKind::kAdamW || changed) continue;
    ASSERT_TRUE(task.attrs.Has("lr")) << task.attrs.ToString();
    task.attrs.Set("lr", 0.5);
    changed = true;
  }
  ASSERT_TRUE(changed);
  auto report = CheckPlanNumerics(*spec, plan, /*seed=*/12);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->max_rel_error_loss, 1e-12);
  EXPECT_GT(report->max_rel_error_parameters, 1e-3) << report->worst;
}

}  // namespace
}  // namespace loom::exec
