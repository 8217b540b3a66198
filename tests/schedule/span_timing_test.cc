#include "schedule/span_timing.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "schedule/placements.h"
#include "schedule/predefined.h"

namespace loom::schedule {
namespace {

Block MakeBlock(const std::string& name, int device, int64_t span, std::vector<Dep> preds = {}) {
  Block b;
  b.name = name;
  b.span = span;
  b.devices = {device};
  b.preds = std::move(preds);
  return b;
}

// Device 0 runs X, then Y, which waits for a long block on device 1. As soon as
// possible, X starts at 0 and device 0 spans 11; started later, X leaves device 0
// a span of 2 and the longest span is device 1's 10, its own work.
TEST(SpanTimingTest, DelaysAFirstBlockThatWouldOnlyWait) {
  BlockModel m;
  m.name = "wait";
  m.num_devices = 2;
  m.blocks = {MakeBlock("X", 0, 1), MakeBlock("L", 1, 10), MakeBlock("Y", 0, 1, {Dep{1, 0}})};
  Schedule s;
  s.microbatches = 1;
  s.order = {{{0, 0}, {2, 0}}, {{1, 0}}};
  auto asap = Simulate(m, s);
  ASSERT_TRUE(asap.ok() && asap->valid);
  EXPECT_EQ(asap->span, 11);
  auto timed = TimeForLeastSpan(m, s);
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_EQ(timed->order, s.order);
  auto sim = Simulate(m, *timed);
  ASSERT_TRUE(sim.ok() && sim->valid) << sim->violation;
  EXPECT_EQ(sim->span, 10);
  // The earliest times that do it: X at 1 (Y at 10 ends at 11, 10 after X starts).
  EXPECT_EQ(timed->start, (std::vector<int64_t>{1, 0, 10}));
  EXPECT_DOUBLE_EQ(sim->span_bubble_ratio, 1.0 - 12.0 / 20.0);
}

// A reference: the least span found by trying every span upward from the largest
// device work, each checked by plain Bellman-Ford over all constraints at once.
int64_t LeastSpanByBellmanFord(const BlockModel& m, const Schedule& s, int64_t upper) {
  const int n = m.num_blocks();
  const int total = n * s.microbatches;
  struct Edge {
    int from, to;
    int64_t weight;
  };
  std::vector<Edge> fixed;
  for (int id = 0; id < total; ++id) {
    for (const Dep& p : m.blocks[id % n].preds) {
      fixed.push_back({id - id % n + p.block, id, m.blocks[p.block].span + p.lag});
    }
  }
  int64_t lower = 0;
  for (const auto& order : s.order) {
    int64_t busy = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      busy += m.blocks[order[i].block].span;
      if (i > 0) {
        fixed.push_back({order[i - 1].microbatch * n + order[i - 1].block,
                         order[i].microbatch * n + order[i].block,
                         m.blocks[order[i - 1].block].span});
      }
    }
    lower = std::max(lower, busy);
  }
  for (int64_t limit = lower; limit <= upper; ++limit) {
    std::vector<Edge> edges = fixed;
    for (const auto& order : s.order) {
      if (order.empty()) continue;
      const Instance& last = order.back();
      edges.push_back({last.microbatch * n + last.block,
                       order.front().microbatch * n + order.front().block,
                       m.blocks[last.block].span - limit});
    }
    std::vector<int64_t> t(total, 0);
    bool changed = true;
    for (int round = 0; round <= total && changed; ++round) {
      changed = false;
      for (const Edge& e : edges) {
        if (t[e.from] + e.weight > t[e.to]) {
          t[e.to] = t[e.from] + e.weight;
          changed = true;
        }
      }
    }
    if (!changed) return limit;
  }
  return upper;
}

// Published schedules on small stage models with unequal costs and transfer lags:
// the timing keeps every order and rule, never lengthens a span, and reaches the
// least span the reference finds.
TEST(SpanTimingTest, LeastSpanOfPublishedSchedulesMatchesAReference) {
  int checked = 0;
  for (const std::string& name : {"1f1b", "gpipe", "zb_h1", "zb_h2"}) {
    for (int p : {2, 3, 4}) {
      for (const StageCosts& c : {StageCosts{2, 3, 1, 1, 2, 1}, StageCosts{3, 2, 2, 0, 2, 1},
                                  StageCosts{1, 1, 1, 2, 2, 1}}) {
        auto m = MakeStageModel(p, p, "loop", c);
        ASSERT_TRUE(m.ok()) << m.status();
        for (int n : {1, 3, 6}) {
          SCOPED_TRACE(absl::StrCat(name, " p ", p, " n ", n, " costs ", c.forward, ",",
                                    c.backward_input, ",", c.backward_weight, ",", c.comm));
          auto s = MakePredefinedSchedule(name, *m, n);
          ASSERT_TRUE(s.ok()) << s.status();
          auto asap = Simulate(*m, *s);
          ASSERT_TRUE(asap.ok() && asap->valid);
          auto timed = TimeForLeastSpan(*m, *s);
          ASSERT_TRUE(timed.ok()) << timed.status();
          EXPECT_EQ(timed->order, s->order);
          auto sim = Simulate(*m, *timed);
          ASSERT_TRUE(sim.ok());
          ASSERT_TRUE(sim->valid) << sim->violation;
          EXPECT_EQ(sim->peak_memory, asap->peak_memory);
          EXPECT_LE(sim->span, asap->span);
          EXPECT_EQ(sim->span, LeastSpanByBellmanFord(*m, *s, asap->span));
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 3 * 3 * 3);
}

// Orders that deadlock cannot be timed: the simulator's reason is given.
TEST(SpanTimingTest, RefusesOrdersThatDeadlock) {
  auto m = MakeStageModel(2, 2, "loop", StageCosts{1, 1, 0, 0, 1, 0});
  ASSERT_TRUE(m.ok());
  Schedule s;
  s.microbatches = 1;
  // Device 0 runs B0 before F0: B0 waits for B1, which waits for F0.
  s.order = {{{m->Find("B0"), 0}, {m->Find("F0"), 0}}, {{m->Find("F1"), 0}, {m->Find("B1"), 0}}};
  auto timed = TimeForLeastSpan(*m, s);
  ASSERT_FALSE(timed.ok());
  EXPECT_NE(timed.status().message().find("deadlock"), std::string::npos) << timed.status();
}

}  // namespace
}  // namespace loom::schedule
