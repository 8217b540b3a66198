#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

namespace loom::schedule {
namespace {

using ::testing::HasSubstr;

// Parses "F0.0 B0.0 ..." into instances of `model`.
std::vector<Instance> Row(const BlockModel& model, const std::string& text) {
  std::vector<Instance> row;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t dot = item.rfind('.');
    row.push_back(Instance{model.Find(item.substr(0, dot)), std::stoi(item.substr(dot + 1))});
    pos = end + 1;
  }
  return row;
}

// vshape on 2 devices (F 1, B 3), 2 micro-batches in 1F1B order.
struct TwoStage {
  BlockModel model = *MakePlacement("vshape", 2);
  Schedule schedule;
  TwoStage() {
    schedule.microbatches = 2;
    schedule.order = {Row(model, "F0.0 F0.1 B0.0 B0.1"), Row(model, "F1.0 B1.0 F1.1 B1.1")};
  }
};

// As-soon-as-possible timing of a 1F1B order: the textbook makespan and memory.
TEST(SimulateTest, TimesOneFOneBAsSoonAsPossible) {
  TwoStage t;
  auto r = Simulate(t.model, t.schedule);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->valid) << r->violation;
  // (N + D - 1)(F + B) = 3 * 4.
  EXPECT_EQ(r->makespan, 12);
  EXPECT_EQ(r->peak_memory, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r->busy, (std::vector<int64_t>{8, 8}));
  EXPECT_DOUBLE_EQ(r->bubble_ratio, 1.0 - 16.0 / 24.0);
}

// Orders that wait on each other are a deadlock naming the devices and instances.
TEST(SimulateTest, ReportsDeadlockCycle) {
  TwoStage t;
  // Device 1 wants micro-batch 1 first; device 0 sends micro-batch 0 first but then
  // waits for B0.0, which needs device 1 to finish micro-batch 1's backward first.
  t.schedule.order = {Row(t.model, "F0.0 B0.0 F0.1 B0.1"), Row(t.model, "F1.1 B1.1 F1.0 B1.0")};
  auto r = Simulate(t.model, t.schedule);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->valid);
  EXPECT_THAT(r->violation, HasSubstr("deadlock on devices 0, 1"));
  EXPECT_THAT(r->violation, HasSubstr("'B0.0' waits for"));
}

// A missing instance and one on the wrong device are named.
TEST(SimulateTest, ReportsIncompleteSchedules) {
  TwoStage t;
  t.schedule.order[0] = Row(t.model, "F0.0 F0.1 B0.0");
  auto r = Simulate(t.model, t.schedule);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->violation, "completeness: 'B0.1' is not scheduled on device 0");
  t = TwoStage();
  t.schedule.order[1].push_back(Instance{t.model.Find("F0"), 0});
  r = Simulate(t.model, t.schedule);
  EXPECT_THAT(r->violation, HasSubstr("placement: 'F0.0' is ordered on device 1"));
  t = TwoStage();
  t.schedule.order[0].push_back(Instance{t.model.Find("F0"), 1});
  r = Simulate(t.model, t.schedule);
  EXPECT_THAT(r->violation, HasSubstr("'F0.1' is scheduled twice on device 0"));
}

// The running memory sum above the cap is a violation at the instance that crosses it.
TEST(SimulateTest, ReportsMemoryAboveCap) {
  TwoStage t;
  t.model.SetUniformCap(1);
  auto r = Simulate(t.model, t.schedule);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->violation, HasSubstr("memory: device 0 reaches 2 at 'F0.1' (time 1), above its cap 1"));
}

// Explicit times are checked for overlap and dependencies.
TEST(SimulateTest, ChecksExplicitTimes) {
  TwoStage t;
  const int n = t.model.num_blocks();  // F0 F1 B1 B0
  std::vector<int64_t> start(2 * n);
  auto set = [&](const char* block, int m, int64_t time) { start[m * n + t.model.Find(block)] = time; };
  set("F0", 0, 0); set("F1", 0, 1); set("B1", 0, 2); set("B0", 0, 5);
  set("F0", 1, 1); set("F1", 1, 5); set("B1", 1, 6); set("B0", 1, 9);
  t.schedule.start = start;
  auto r = Simulate(t.model, t.schedule);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->valid) << r->violation;
  EXPECT_EQ(r->makespan, 12);
  set("B0", 1, 7);  // overlaps B0.0 (5 to 8) on device 0
  t.schedule.start = start;
  r = Simulate(t.model, t.schedule);
  EXPECT_THAT(r->violation, HasSubstr("device 0: 'B0.1' starts at 7 before 'B0.0'"));
  set("B0", 1, 9);
  set("F1", 1, 4);  // overlaps B1.0 (2 to 5) on device 1
  t.schedule.start = start;
  r = Simulate(t.model, t.schedule);
  EXPECT_THAT(r->violation, HasSubstr("device 1: 'F1.1' starts at 4"));
}

// A malformed schedule is an error, not a verdict.
TEST(SimulateTest, MalformedScheduleIsAnError) {
  TwoStage t;
  t.schedule.order.pop_back();
  EXPECT_FALSE(Simulate(t.model, t.schedule).ok());
  t = TwoStage();
  t.schedule.order[0][0].microbatch = 7;
  auto r = Simulate(t.model, t.schedule);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("out of range"));
}

// The JSON form keeps the model, the orders and the times.
TEST(SimulateTest, ScheduleJsonRoundTrip) {
  TwoStage t;
  auto sim = Simulate(t.model, t.schedule);
  ASSERT_TRUE(sim.ok());
  auto loaded = ScheduleFromJson(ScheduleToJson(t.model, t.schedule, &*sim), "s.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model, t.model);
  EXPECT_EQ(loaded->schedule.order, t.schedule.order);
  EXPECT_EQ(loaded->schedule.start, sim->start);
  auto again = Simulate(loaded->model, loaded->schedule);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->valid);
  EXPECT_EQ(again->makespan, sim->makespan);
  auto bad = ScheduleFromJson(R"({"format": "loom.schedule", "microbatches": 1,
      "blocks": {"devices": 1, "blocks": [{"name": "a", "devices": [0]}]},
      "order": [[["b", 0]]]})", "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()), "x.json: order[0][0]: unknown block 'b'");
}

}  // namespace
}  // namespace loom::schedule
