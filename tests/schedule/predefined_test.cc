#include "schedule/predefined.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/block_model.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

// Notation: p devices, m micro-batches of the model, F / I / W the spans of a forward,
// an input backward and a weight backward (B = the span of an unsplit backward), comm
// lag 0 unless a test says otherwise. "Idle" of a device is makespan - busy; "span
// idle" is (its last end - its first start) - busy, the bubble of a schedule whose
// next iteration may start on each device as soon as that device is done (Zero
// Bubble's post-validation, which ZB-H2 and ZB-V assume for "zero bubble").

namespace loom::schedule {
namespace {

StageCosts Costs(int64_t f, int64_t b, int64_t w = 0, int64_t comm = 0) {
  StageCosts c;
  c.forward = f;
  c.backward_input = b;
  c.backward_weight = w;
  c.comm = comm;
  return c;
}

// The model each schedule is defined on, with v chunks per device for interleaved.
BlockModel ModelFor(const std::string& name, int p, const StageCosts& c, int v = 2) {
  absl::StatusOr<BlockModel> m;
  if (name == "chimera" || name == "dualpipe") {
    m = MakeBidirectionalStageModel(p, c);
  } else if (name == "zb_v") {
    m = MakeStageModel(p, 2 * p, "v", c);
  } else {
    m = MakeStageModel(p, name == "interleaved_1f1b" ? p * v : p, "loop", c);
  }
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

struct SimRun {
  Schedule schedule;
  SimResult sim;
  std::vector<int64_t> idle, span_idle;
};

SimRun Simulated(const std::string& name, const BlockModel& model, int m) {
  SimRun r;
  absl::StatusOr<Schedule> s = MakePredefinedSchedule(name, model, m);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return r;
  r.schedule = *s;
  absl::StatusOr<SimResult> sim = Simulate(model, *s);
  EXPECT_TRUE(sim.ok()) << sim.status();
  if (!sim.ok()) return r;
  r.sim = *sim;
  EXPECT_TRUE(sim->valid) << name << ": " << sim->violation;
  if (!sim->valid) return r;
  const int n = model.num_blocks();
  for (int d = 0; d < model.num_devices; ++d) {
    int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
    for (const Instance& x : s->order[d]) {
      const int64_t start = sim->start[x.microbatch * n + x.block];
      first = std::min(first, start);
      last = std::max(last, start + model.blocks[x.block].span);
    }
    r.idle.push_back(sim->makespan - sim->busy[d]);
    r.span_idle.push_back(last - first - sim->busy[d]);
  }
  return r;
}

// The names are listed sorted and each builds a schedule.
TEST(PredefinedScheduleTest, NamesAreSortedAndKnown) {
  const std::vector<std::string> names = PredefinedScheduleNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.size(), 8u);
  for (const std::string& name : names) {
    const bool split = name != "gpipe" && name != "1f1b" && name != "interleaved_1f1b" &&
                       name != "chimera";
    auto s = MakePredefinedSchedule(name, ModelFor(name, 4, Costs(1, 1, split ? 1 : 0)), 8);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    EXPECT_EQ(s->name, name);
    EXPECT_EQ(s->microbatches, 8);
    EXPECT_TRUE(s->start.empty());
  }
}

// Every schedule simulates as valid for several device and micro-batch counts, with
// equal and unequal spans and with a transfer lag between stages.
TEST(PredefinedScheduleTest, AllSimulateValid) {
  const std::vector<StageCosts> unsplit = {Costs(1, 1), Costs(2, 3), Costs(3, 1, 0, 1)};
  const std::vector<StageCosts> split = {Costs(1, 1, 1), Costs(3, 2, 1), Costs(2, 2, 3, 1)};
  int checked = 0;
  for (const std::string& name : PredefinedScheduleNames()) {
    const bool needs_split = name == "zb_h1" || name == "zb_h2" || name == "zb_v" ||
                             name == "dualpipe";
    for (int p : {2, 4, 6}) {
      for (int m : {1, 2, 3, 6, 8, 12}) {
        if (name == "interleaved_1f1b" && m % p != 0) continue;
        if (name == "dualpipe" && m < p) continue;
        for (const StageCosts& c : needs_split ? split : unsplit) {
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m));
          Simulated(name, ModelFor(name, p, c), m);
          ++checked;
        }
        if (name == "interleaved_1f1b") Simulated(name, ModelFor(name, p, unsplit[1], 3), m);
      }
    }
  }
  EXPECT_GT(checked, 300);
}

// GPipe and 1F1B: makespan (m + p - 1)(F + B) and bubble ratio (p - 1)/(m + p - 1),
// for F = B and F != B, and with fewer micro-batches than devices.
TEST(PredefinedScheduleTest, GPipeAndOneFOneBMatchTheirBubble) {
  for (const std::string name : {"gpipe", "1f1b"}) {
    for (auto [p, m, f, b] : std::vector<std::array<int, 4>>{
             {4, 8, 1, 1}, {4, 8, 1, 2}, {6, 12, 2, 3}, {4, 3, 1, 1}, {8, 16, 3, 1}}) {
      SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m));
      const SimRun r = Simulated(name, ModelFor(name, p, Costs(f, b)), m);
      EXPECT_EQ(r.sim.makespan, int64_t{m + p - 1} * (f + b));
      EXPECT_DOUBLE_EQ(r.sim.bubble_ratio, static_cast<double>(p - 1) / (m + p - 1));
      for (int64_t idle : r.idle) EXPECT_EQ(idle, int64_t{p - 1} * (f + b));
    }
  }
}

// Peak activation memory: 1F1B keeps p - i micro-batches on device i, GPipe all m
// (activation 2 per micro-batch and stage).
TEST(PredefinedScheduleTest, OneFOneBAndGPipePeakMemory) {
  const int p = 4, m = 8;
  const SimRun one = Simulated("1f1b", ModelFor("1f1b", p, Costs(1, 2)), m);
  const SimRun gpipe = Simulated("gpipe", ModelFor("gpipe", p, Costs(1, 2)), m);
  for (int i = 0; i < p; ++i) {
    EXPECT_EQ(one.sim.peak_memory[i], 2 * (p - i));
    EXPECT_EQ(gpipe.sim.peak_memory[i], 2 * m);
  }
}

// Megatron's interleaved 1F1B with v chunks per device, F and B per chunk: makespan
// m v (F + B) + (p - 1)(F + B), i.e. a bubble of (p - 1)/(v m) of the ideal m v (F + B).
TEST(PredefinedScheduleTest, InterleavedMatchesItsBubble) {
  for (auto [p, v, m, f, b] : std::vector<std::array<int, 5>>{
           {4, 2, 8, 1, 1}, {4, 3, 4, 1, 2}, {4, 2, 12, 2, 3}, {2, 4, 6, 3, 1}, {8, 2, 16, 1, 2}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" +
                 std::to_string(m));
    const SimRun r = Simulated("interleaved_1f1b", ModelFor("interleaved_1f1b", p, Costs(f, b), v), m);
    const int64_t ideal = int64_t{m} * v * (f + b);
    EXPECT_EQ(r.sim.makespan, ideal + int64_t{p - 1} * (f + b));
    for (int64_t idle : r.idle) EXPECT_EQ(idle, int64_t{p - 1} * (f + b));
    EXPECT_DOUBLE_EQ(static_cast<double>(r.idle[0]) / ideal, (p - 1) / static_cast<double>(v * m));
  }
}

// ZB-H1 (Qi et al. table 2), m >= p: every device idles (p - 1)(F + I - W) (with F = I = W a
// third of 1F1B's, the rate (p - 1)/(3m) of the ideal), and device i holds at most
// (p - i) activations plus i weight-gradient parts (activation 2, of which W frees 1),
// so the peak over devices is 1F1B's p activations.
TEST(PredefinedScheduleTest, ZbH1MatchesItsBubbleAndMemory) {
  for (auto [p, m, f, i, w] : std::vector<std::array<int, 5>>{
           {4, 8, 1, 1, 1}, {4, 8, 3, 2, 1}, {5, 12, 2, 3, 2}, {8, 16, 1, 1, 1}, {4, 4, 2, 1, 1}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    const SimRun r = Simulated("zb_h1", ModelFor("zb_h1", p, Costs(f, i, w)), m);
    for (int64_t idle : r.idle) EXPECT_EQ(idle, int64_t{p - 1} * (f + i - w));
    if (f == i && i == w) {
      EXPECT_DOUBLE_EQ(static_cast<double>(r.idle[0]) / (3 * m * f), (p - 1) / (3.0 * m));
    }
    for (int d = 0; d < p; ++d) EXPECT_EQ(r.sim.peak_memory[d], 2 * (p - d) + d);
    EXPECT_EQ(*std::max_element(r.sim.peak_memory.begin(), r.sim.peak_memory.end()), 2 * p);
  }
}

// ZB-H2 (Qi et al. table 2, bubble (p - 1)(F + I - 2W), memory 2p - 1 activations),
// measured per device as span idle, since its zero bubble drops the optimizer sync:
// with F = I = W every device is busy from its first start to its last end (the
// makespan still carries the (p - 1) F ramp); with W = 1 < F, I the first device's span
// idle is exactly (p - 1)(F + I - 2W) and no device idles more. No device holds more
// than 2p - 1 activations; with F = I = W device i peaks at 2 (p - 1 - i) + 1
// activations plus 2i weight-gradient parts (the paper's per-worker count). With W
// closer to (F + I) / 2 (e.g. F, I, W = 3, 2, 2) the 2p - 1 bound holds back the last
// forwards and the first device's span idle exceeds the formula (5 instead of 3 at
// p = 4): the formula is the equal-span picture, not a bound the greedy order reaches.
TEST(PredefinedScheduleTest, ZbH2MatchesItsBubbleAndMemory) {
  for (auto [p, m, f, i, w] : std::vector<std::array<int, 5>>{
           {4, 8, 1, 1, 1}, {4, 12, 2, 2, 2}, {6, 12, 1, 1, 1}, {4, 12, 3, 2, 1},
           {4, 12, 2, 2, 1}, {6, 12, 3, 3, 1}, {4, 12, 1, 2, 1}, {4, 12, 5, 3, 2}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) + " F=" +
                 std::to_string(f) + " I=" + std::to_string(i) + " W=" + std::to_string(w));
    const SimRun r = Simulated("zb_h2", ModelFor("zb_h2", p, Costs(f, i, w)), m);
    const int64_t bubble = int64_t{p - 1} * (f + i - 2 * w);
    EXPECT_EQ(r.span_idle[0], bubble);
    EXPECT_EQ(*std::max_element(r.span_idle.begin(), r.span_idle.end()), bubble);
    if (f == i && i == w) {
      EXPECT_EQ(r.sim.makespan, int64_t{m} * 3 * f + (p - 1) * f);
    }
    for (int d = 0; d < p; ++d) {
      EXPECT_LE(r.sim.peak_memory[d], 2 * (2 * p - 1));
      if (f == i && i == w) {
        EXPECT_EQ(r.sim.peak_memory[d], 2 * (2 * (p - 1 - d) + 1) + 2 * d);
      }
    }
  }
}

// ZB-V (Qi et al. section 6): with F = I = W (per chunk) every device is busy from its
// first start to its last end, and each device peaks at 2p chunk activations (p
// micro-batches at the stage model's 2 per chunk, the 1F1B peak of a half-size chunk).
TEST(PredefinedScheduleTest, ZbVHasZeroBubbleWithEqualSpans) {
  for (auto [p, m, t] : std::vector<std::array<int, 3>>{{4, 8, 1}, {4, 12, 2}, {6, 12, 1}, {8, 16, 1}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    const SimRun r = Simulated("zb_v", ModelFor("zb_v", p, Costs(t, t, t)), m);
    for (int64_t idle : r.span_idle) EXPECT_EQ(idle, 0);
    EXPECT_EQ(r.sim.makespan, int64_t{m} * 6 * t + (p - 1) * t);
    for (int d = 0; d < p; ++d) EXPECT_EQ(r.sim.peak_memory[d], 2 * 2 * p);
  }
}

// Chimera (Li & Hoefler table 2): with N = 2m real micro-batches (m pairs) and an equal
// forward and backward span, every device idles (p/2 - 1)(F + B) and the bubble ratio
// is (p - 2)/(2N + p - 2).
TEST(PredefinedScheduleTest, ChimeraMatchesItsBubbleWithEqualSpans) {
  for (auto [p, m, t] : std::vector<std::array<int, 3>>{
           {4, 2, 1}, {4, 4, 1}, {4, 8, 1}, {6, 3, 1}, {6, 6, 2}, {8, 4, 1}, {8, 8, 1}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    const SimRun r = Simulated("chimera", ModelFor("chimera", p, Costs(t, t)), m);
    for (int64_t idle : r.idle) EXPECT_EQ(idle, int64_t{p / 2 - 1} * 2 * t);
    const int n = 2 * m;
    EXPECT_DOUBLE_EQ(r.sim.bubble_ratio, static_cast<double>(p - 2) / (2 * n + p - 2));
  }
}

// DualPipe (README: (PP/2 - 1)(F&B + B - 3W), B a full backward, activation PP + 1).
// Here F and B of an overlapped pair are separate blocks one after the other, and the
// next stage waits only for the forward, so the pair does not delay the chain: every
// device idles exactly (p/2 - 1)(F + I - W) = (p/2 - 1)(F + B - 2W), ZB1P's bubble with
// half the depth, and peaks at p + 1 activations (2 each).
TEST(PredefinedScheduleTest, DualPipeMatchesItsBubbleWithoutOverlap) {
  for (auto [p, m, f, i, w] : std::vector<std::array<int, 5>>{
           {4, 4, 1, 1, 1}, {4, 8, 1, 1, 1}, {6, 6, 1, 1, 1}, {8, 10, 1, 1, 1},
           {8, 10, 2, 1, 1}, {8, 16, 3, 2, 1}, {8, 10, 2, 2, 1}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    const SimRun r = Simulated("dualpipe", ModelFor("dualpipe", p, Costs(f, i, w)), m);
    for (int64_t idle : r.idle) EXPECT_EQ(idle, int64_t{p / 2 - 1} * (f + i - w));
    EXPECT_EQ(r.sim.makespan, int64_t{2} * m * (f + i + w) + (p / 2 - 1) * (f + i - w));
    for (int64_t peak : r.sim.peak_memory) EXPECT_EQ(peak, 2 * (p + 1));
  }
}

// A model or micro-batch count a schedule is not defined for is a clear
// InvalidArgument naming the schedule.
TEST(PredefinedScheduleTest, RejectsModelsTheScheduleDoesNotFit) {
  auto expect = [](const std::string& name, const BlockModel& model, int m,
                   const std::string& text) {
    auto s = MakePredefinedSchedule(name, model, m);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  };
  const BlockModel loop = ModelFor("1f1b", 4, Costs(1, 1));
  const BlockModel loop_split = ModelFor("zb_h1", 4, Costs(1, 1, 1));
  expect("zigzag", loop, 8, "unknown schedule 'zigzag'");
  expect("1f1b", loop, 0, "at least one micro-batch");
  expect("interleaved_1f1b", ModelFor("interleaved_1f1b", 4, Costs(1, 1)), 6,
         "divisible by the 4 devices");
  expect("zb_h1", loop, 8, "schedule 'zb_h1': needs a split backward");
  expect("zb_h2", loop, 8, "needs a split backward");
  expect("zb_v", loop_split, 8, "needs the v layout");
  expect("zb_v", ModelFor("zb_v", 4, Costs(1, 1)), 8, "needs a split backward");
  expect("1f1b", ModelFor("interleaved_1f1b", 4, Costs(1, 1)), 8, "one stage per device");
  expect("chimera", loop, 8, "needs a bidirectional stage model");
  expect("dualpipe", loop_split, 8, "needs a bidirectional stage model");
  expect("chimera", ModelFor("chimera", 4, Costs(1, 1, 1)), 8, "needs an unsplit backward");
  expect("dualpipe", ModelFor("dualpipe", 4, Costs(1, 1)), 8, "needs a split backward");
  expect("dualpipe", ModelFor("dualpipe", 4, Costs(1, 1, 1)), 3, "at least 4 micro-batch pairs");
  expect("chimera", ModelFor("chimera", 3, Costs(1, 1)), 4, "even device count");
  auto tessel = MakePlacement("xshape", 4);
  ASSERT_TRUE(tessel.ok());
  expect("gpipe", *tessel, 4, "needs a pipeline stage model");
}

// The bidirectional model names its blocks by direction and places the up pipeline's
// stage s on device p - 1 - s.
TEST(PredefinedScheduleTest, BidirectionalModelLayout) {
  auto m = MakeBidirectionalStageModel(4, Costs(1, 2, 1, 1));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(ValidateBlockModel(*m).ok());
  EXPECT_EQ(m->num_blocks(), 24);
  const Block& fu1 = m->blocks[m->Find("Fu1")];
  EXPECT_EQ(fu1.devices, std::vector<int>{2});
  EXPECT_EQ(fu1.stage, 1);
  ASSERT_EQ(fu1.preds.size(), 1u);
  EXPECT_EQ(m->blocks[fu1.preds[0].block].name, "Fu0");
  EXPECT_EQ(fu1.preds[0].lag, 1);
  EXPECT_EQ(m->blocks[m->Find("Wd3")].devices, std::vector<int>{3});
  EXPECT_EQ(m->blocks[m->Find("Iu0")].devices, std::vector<int>{3});
  EXPECT_FALSE(MakeBidirectionalStageModel(1, Costs(1, 1)).ok());
}

}  // namespace
}  // namespace loom::schedule
