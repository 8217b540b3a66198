#include "schedule/render.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/json_util.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

namespace loom::schedule {
namespace {

// A valid schedule for tests: list scheduling, each step placing the instance that
// can start earliest (backward kinds first on ties, then the lower micro-batch).
Schedule Greedy(const BlockModel& model, int microbatches) {
  const int n = model.num_blocks();
  const int total = n * microbatches;
  constexpr int64_t kUnplaced = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> start(total, kUnplaced);
  std::vector<int64_t> free(model.num_devices, 0);
  for (int placed = 0; placed < total; ++placed) {
    int best = -1;
    int64_t best_start = 0;
    auto rank = [&](int id) {
      const BlockKind k = model.blocks[id % n].kind;
      return k == BlockKind::kForward || k == BlockKind::kOther ? 1 : 0;
    };
    for (int id = 0; id < total; ++id) {
      if (start[id] != kUnplaced) continue;
      const int m = id / n;
      const Block& b = model.blocks[id % n];
      int64_t ready = 0;
      bool ok = true;
      for (const Dep& p : b.preds) {
        const int64_t s = start[m * n + p.block];
        if (s == kUnplaced) {
          ok = false;
          break;
        }
        ready = std::max(ready, s + model.blocks[p.block].span + p.lag);
      }
      if (!ok) continue;
      for (int d : b.devices) ready = std::max(ready, free[d]);
      if (best < 0 || ready < best_start ||
          (ready == best_start && (rank(id) < rank(best) ||
                                   (rank(id) == rank(best) && id / n < best / n)))) {
        best = id;
        best_start = ready;
      }
    }
    start[best] = best_start;
    for (int d : model.blocks[best % n].devices) {
      free[d] = best_start + model.blocks[best % n].span;
    }
  }
  Schedule s = ScheduleFromTimes(model, microbatches, start);
  s.name = "greedy";
  return s;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

struct Case {
  BlockModel model;
  Schedule schedule;
  SimResult sim;
};

Case Make(absl::string_view placement, int devices, int microbatches) {
  Case c;
  auto model = MakePlacement(placement, devices);
  EXPECT_TRUE(model.ok()) << model.status();
  c.model = *model;
  c.schedule = Greedy(c.model, microbatches);
  auto sim = Simulate(c.model, c.schedule);
  EXPECT_TRUE(sim.ok()) << sim.status();
  c.sim = *sim;
  EXPECT_TRUE(c.sim.valid) << c.sim.violation;
  return c;
}

int InstanceDevices(const BlockModel& model, int microbatches) {
  int per_mb = 0;
  for (const Block& b : model.blocks) per_mb += static_cast<int>(b.devices.size());
  return per_mb * microbatches;
}

// The trace parses as JSON, names every device thread and has one complete event
// per instance per device, at the simulated start scaled to microseconds.
TEST(RenderTest, ChromeTraceHasOneEventPerInstanceDevice) {
  Case c = Make("mshape", 4, 6);
  const std::string text = ScheduleToChromeTrace(c.model, c.schedule, c.sim, /*microseconds_per_unit=*/10);
  const ir::Json j = ir::Json::parse(text);
  int complete = 0, threads = 0, counters = 0;
  for (const ir::Json& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      const int block = c.model.Find(e["name"].get<std::string>());
      ASSERT_GE(block, 0);
      const int m = e["args"]["microbatch"];
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(),
                       10.0 * c.sim.start[m * c.model.num_blocks() + block]);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 10.0 * c.model.blocks[block].span);
      const int tid = e["tid"];
      EXPECT_TRUE(std::binary_search(c.model.blocks[block].devices.begin(),
                                     c.model.blocks[block].devices.end(), tid));
    } else if (ph == "M" && e["name"] == "thread_name") {
      EXPECT_EQ(e["args"]["name"], absl::StrCat("device ", e["tid"].get<int>()));
      ++threads;
    } else if (ph == "C") {
      ++counters;
    }
  }
  EXPECT_EQ(complete, InstanceDevices(c.model, 6));
  EXPECT_EQ(threads, 4);
  EXPECT_GT(counters, 4);
  EXPECT_EQ(j["otherData"]["makespan"], c.sim.makespan);
}

// The memory counter of a device ends at the net memory of all its micro-batches
// (0 for a training placement) and peaks at the simulated peak.
TEST(RenderTest, ChromeTraceMemoryCountersFollowLevels) {
  Case c = Make("vshape", 4, 4);
  const ir::Json j = ir::Json::parse(ScheduleToChromeTrace(c.model, c.schedule, c.sim));
  std::vector<int64_t> last(4, 0), peak(4, 0);
  for (const ir::Json& e : j["traceEvents"]) {
    if (e["ph"] != "C") continue;
    const std::string name = e["name"];
    const int d = name.back() - '0';
    last[d] = e["args"]["memory"];
    peak[d] = std::max(peak[d], last[d]);
  }
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(last[d], 0) << d;
    EXPECT_EQ(peak[d], c.sim.peak_memory[d]) << d;
  }
}

// The SVG is one well-formed document (balanced tags), with one box per instance
// per device, micro-batch numbers in wide boxes and the title's numbers.
TEST(RenderTest, SvgHasOneBoxPerInstanceDeviceAndLabels) {
  Case c = Make("vshape", 4, 8);
  const std::string svg = ScheduleToSvg(c.model, c.schedule, c.sim);
  EXPECT_TRUE(absl::StartsWith(svg, "<?xml"));
  EXPECT_EQ(Count(svg, "<svg "), 1);
  EXPECT_EQ(Count(svg, "</svg>"), 1);
  EXPECT_EQ(Count(svg, "<rect class=\"blk\""), InstanceDevices(c.model, 8));
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
  EXPECT_EQ(Count(svg, "<g"), Count(svg, "</g>"));
  // Short schedule: boxes are wide, every instance carries its number.
  EXPECT_EQ(Count(svg, "class=\"mb\""), InstanceDevices(c.model, 8));
  EXPECT_NE(svg.find(">7</text>"), std::string::npos);
  EXPECT_NE(svg.find(absl::StrCat("makespan ", c.sim.makespan)), std::string::npos);
  EXPECT_NE(svg.find("device 3"), std::string::npos);
  // Only the five XML entities appear after an ampersand.
  for (size_t at = svg.find('&'); at != std::string::npos; at = svg.find('&', at + 1)) {
    const absl::string_view rest = absl::string_view(svg).substr(at);
    EXPECT_TRUE(absl::StartsWith(rest, "&amp;") || absl::StartsWith(rest, "&lt;") ||
                absl::StartsWith(rest, "&gt;") || absl::StartsWith(rest, "&quot;") ||
                absl::StartsWith(rest, "&apos;"));
  }
}

// A long schedule keeps a bounded width and drops the numbers that do not fit.
TEST(RenderTest, SvgScalesLongSchedulesAndOmitsNarrowLabels) {
  auto model = MakeStageModel(/*devices=*/8, /*stages=*/8, "loop", StageCosts{});
  ASSERT_TRUE(model.ok()) << model.status();
  const Schedule schedule = Greedy(*model, 128);
  auto sim = Simulate(*model, schedule);
  ASSERT_TRUE(sim.ok() && sim->valid);
  const std::string svg = ScheduleToSvg(*model, schedule, *sim);
  const size_t w = svg.find("width=\"");
  const int width = std::stoi(svg.substr(w + 7));
  EXPECT_GE(width, 1600);
  EXPECT_LE(width, 2600);
  EXPECT_EQ(Count(svg, "<rect class=\"blk\""), InstanceDevices(*model, 128));
  EXPECT_LT(Count(svg, "class=\"mb\""), InstanceDevices(*model, 128));
}

// Names with markup characters are escaped in the title, legend and tooltips.
TEST(RenderTest, SvgEscapesNames) {
  BlockModel model;
  model.name = "a<b&c";
  model.num_devices = 1;
  Block b;
  b.name = "x<&\"y";
  b.devices = {0};
  model.blocks.push_back(b);
  Schedule s;
  s.microbatches = 2;
  s.name = "'quoted'";
  s.order = {{{0, 0}, {0, 1}}};
  auto sim = Simulate(model, s);
  ASSERT_TRUE(sim.ok() && sim->valid);
  const std::string svg = ScheduleToSvg(model, s, *sim);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_EQ(svg.find("x<&"), std::string::npos);
  EXPECT_NE(svg.find("a&lt;b&amp;c"), std::string::npos);
  EXPECT_NE(svg.find("x&lt;&amp;&quot;y"), std::string::npos);
  EXPECT_NE(svg.find("&apos;quoted&apos;"), std::string::npos);
  EXPECT_EQ(XmlEscape("<&>\"'"), "&lt;&amp;&gt;&quot;&apos;");
  // The trace escapes the same names as JSON.
  const ir::Json j = ir::Json::parse(ScheduleToChromeTrace(model, s, *sim));
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], "a<b&c");
}

// An invalid schedule still renders: its violation in the title, no boxes.
TEST(RenderTest, InvalidScheduleRendersViolation) {
  auto model = MakePlacement("vshape", 4);
  ASSERT_TRUE(model.ok());
  Schedule s;
  s.microbatches = 1;
  s.order.assign(4, {});
  auto sim = Simulate(*model, s);
  ASSERT_TRUE(sim.ok());
  ASSERT_FALSE(sim->valid);
  const std::string svg = ScheduleToSvg(*model, s, *sim);
  EXPECT_NE(svg.find("invalid: completeness"), std::string::npos);
  EXPECT_EQ(Count(svg, "class=\"blk\""), 0);
  const ir::Json j = ir::Json::parse(ScheduleToChromeTrace(*model, s, *sim));
  EXPECT_NE(j["otherData"]["violation"].get<std::string>().find("completeness"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::schedule
