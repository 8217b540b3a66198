#include "schedule/torch_csv.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

namespace loom::schedule {
namespace {

std::string Csv(const std::vector<std::string>& rows) { return absl::StrJoin(rows, "\n") + "\n"; }

LoadedSchedule Load(const std::string& text, const TorchImportOptions& options = {}) {
  auto loaded = ScheduleFromTorchCsv(text, "sched.csv", options);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *loaded : LoadedSchedule{};
}

SimResult Sim(const LoadedSchedule& l) {
  auto sim = Simulate(l.model, l.schedule);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *sim : SimResult{};
}

std::string Error(const std::string& text, const TorchImportOptions& options = {}) {
  auto loaded = ScheduleFromTorchCsv(text, "sched.csv", options);
  return loaded.ok() ? "ok" : std::string(loaded.status().message());
}

// The violation Simulate reports for a CSV, "" when the schedule is valid.
std::string Violation(const std::vector<std::string>& rows) {
  const LoadedSchedule l = Load(Csv(rows));
  return Sim(l).violation;
}

TorchImportOptions CommSteps() {
  TorchImportOptions o;
  o.comm_steps = true;
  return o;
}

// Actions as torch writes them: rank rows, `{stage}{letter}{mb}`, "\r\n" line ends.
TEST(TorchCsvTest, ExportsActionsPerRank) {
  StageCosts c;
  c.backward_weight = 0;
  auto model = MakeStageModel(/*devices=*/2, /*stages=*/2, "loop", c);
  ASSERT_TRUE(model.ok());
  const int f0 = model->Find("F0"), f1 = model->Find("F1"), b0 = model->Find("B0"),
            b1 = model->Find("B1");
  Schedule s;
  s.microbatches = 2;
  s.order = {{{f0, 0}, {f0, 1}, {b0, 0}, {b0, 1}}, {{f1, 0}, {b1, 0}, {f1, 1}, {b1, 1}}};
  auto csv = ScheduleToTorchCsv(*model, s);
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(*csv, "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n");
  // With start times, idle steps are empty fields (torch's None).
  auto sim = Simulate(*model, s);
  ASSERT_TRUE(sim.ok() && sim->valid);
  auto grid = ScheduleToTorchCsv(*model, s, &*sim);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(*grid, "0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n");
}

// Rows ending in "\r\n", "\n" or a lone "\r" read alike.
TEST(TorchCsvTest, EveryLineEndingReadsAlike) {
  auto crlf = ScheduleFromTorchCsv("0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n", "crlf.csv");
  ASSERT_TRUE(crlf.ok()) << crlf.status();
  for (const char* text : {"0F0,0F1,,0B0,,0B1\r,1F0,1B0,1F1,1B1\r",
                           "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1"}) {
    auto other = ScheduleFromTorchCsv(text, "other.csv");
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_EQ(other->schedule.order, crlf->schedule.order);
    EXPECT_EQ(other->model.num_devices, 2);
  }
}

// Blocks torch has no action for are refused with their name.
TEST(TorchCsvTest, ExportRejectsBlocksWithoutStageOrLetter) {
  auto placement = MakePlacement("vshape", 4);
  ASSERT_TRUE(placement.ok());
  Schedule s;
  s.microbatches = 1;
  s.order.assign(4, {});
  auto csv = ScheduleToTorchCsv(*placement, s);
  ASSERT_FALSE(csv.ok());
  EXPECT_TRUE(absl::StrContains(csv.status().message(), "has no pipeline stage"));
  BlockModel other;
  other.num_devices = 1;
  Block b;
  b.name = "loss";
  b.stage = 0;
  b.devices = {0};
  other.blocks.push_back(b);
  csv = ScheduleToTorchCsv(other, s);
  ASSERT_FALSE(csv.ok());
  EXPECT_TRUE(absl::StrContains(csv.status().message(), "'loss' of kind 'other'"));
}

// Ranks, stages, micro-batches, the loop layout and a full backward are inferred.
TEST(TorchCsvTest, ImportsInterleavedLoopSchedule) {
  const LoadedSchedule l = Load(Csv({"0F0,0F1,2F0,2F1,,,,2B0,,2B1,,0B0,,0B1",
                                     ",1F0,1F1,,3F0,3B0,3F1,3B1,,1B0,,1B1"}));
  EXPECT_EQ(l.model.num_devices, 2);
  EXPECT_EQ(l.model.name, "stages-loop-2x4");
  EXPECT_EQ(l.schedule.microbatches, 2);
  EXPECT_EQ(l.model.num_blocks(), 8);  // F0..F3, B3..B0
  EXPECT_EQ(l.model.blocks[l.model.Find("B2")].devices, std::vector<int>{0});
  EXPECT_EQ(l.schedule.order[1].size(), 8u);
  EXPECT_TRUE(Sim(l).valid);
}

// Two stages per rank, down then back up, with I and W: the v layout, split.
TEST(TorchCsvTest, ImportsVScheduleWithSplitBackward) {
  const LoadedSchedule l =
      Load(Csv({"0F0,0F1,,3F0,3I0,3F1,3I1,0I0,3W0,0I1,3W1,0W0,0W1",
                ",1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1"}));
  EXPECT_EQ(l.model.name, "stages-v-2x4");
  EXPECT_NE(l.model.Find("W3"), -1);
  EXPECT_EQ(l.model.blocks[l.model.Find("I2")].devices, std::vector<int>{1});
  EXPECT_TRUE(Sim(l).valid) << Sim(l).violation;
}

// Communication and FSDP actions are skipped; an OVERLAP_F_B runs its
// sub-actions in order; a B in a split model is its I then its W.
TEST(TorchCsvTest, SkipsCommActionsAndExpandsOverlap) {
  const LoadedSchedule l = Load(
      Csv({"0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,(0B0)OVERLAP_F_B,0RECV_B1,0I1,0W1,"
           "0REDUCE_GRAD,0RESHARD",
           "1RECV_F0,1F0,1RECV_F1,(1F1;1B0)OVERLAP_F_B,1SEND_B0,1B1,1SEND_B1"}));
  ASSERT_EQ(l.schedule.order[0].size(), 6u);
  EXPECT_EQ(InstanceLabel(l.model, l.schedule.order[0][2]), "I0.0");
  EXPECT_EQ(InstanceLabel(l.model, l.schedule.order[0][3]), "W0.0");
  ASSERT_EQ(l.schedule.order[1].size(), 6u);
  EXPECT_EQ(InstanceLabel(l.model, l.schedule.order[1][1]), "F1.1");
  EXPECT_EQ(InstanceLabel(l.model, l.schedule.order[1][2]), "I1.0");
  EXPECT_TRUE(Sim(l).valid) << Sim(l).violation;
}

// Errors name the file, the line (rank + 1) and the field.
TEST(TorchCsvTest, ErrorsNameFileLineAndField) {
  EXPECT_EQ(Error(Csv({"0F0,0B0", "1F0,1B0,,,X3F"})), "sched.csv:2:5: unknown action 'X3F'");
  EXPECT_EQ(Error(Csv({"0F0,0BW0"})), "sched.csv:1:2: unknown action '0BW0'");
  EXPECT_EQ(Error(Csv({"0F0,0F"})), "sched.csv:1:2: action '0F' has no micro-batch");
  EXPECT_EQ(Error(Csv({"0F0,1F0", "1B0,0B0"})),
            "sched.csv:2:1: stage 1 is on rank 1 and on rank 0 (at 1:2)");
  EXPECT_EQ(Error(Csv({"0F0,3F0", "1F0"})), "sched.csv: stage 2 has no actions (stages 0..3)");
  EXPECT_TRUE(absl::StrContains(Error(Csv({"0F0,3F0", "1F0,2F0", "", ""})),
                                "neither the loop layout"));
  EXPECT_EQ(Error(Csv({"1F0"})), "sched.csv: stage 0 has no actions (stages 0..1)");
  EXPECT_EQ(Error(""), "sched.csv: no rows");
}

// torch's `_validate_schedule` rules, each caught by the import and Simulate: every
// stage and micro-batch has one F and one B (or one I and one W), a backward
// follows its forward, W follows I, a stage stays on one rank.
TEST(TorchCsvTest, CatchesWhatTorchValidateScheduleRejects) {
  // Valid reference.
  EXPECT_EQ(Violation({"0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"}), "");
  // A forward missing ("Got 1 F microbatches for stage 1, expected 2").
  EXPECT_TRUE(absl::StartsWith(Violation({"0F0,0F1,0B0,0B1", "1F0,1B0,1B1"}), "completeness"));
  // A backward missing.
  EXPECT_TRUE(absl::StartsWith(Violation({"0F0,0F1,0B0,0B1", "1F0,1B0,1F1"}), "completeness"));
  // The same action twice.
  EXPECT_TRUE(absl::StrContains(Violation({"0F0,0F1,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"}),
                                "scheduled twice"));
  // Backward before its forward ("Running Full Backward ... without first running Forward").
  EXPECT_TRUE(absl::StartsWith(Violation({"0F0,0F1,0B0,0B1", "1B0,1F0,1F1,1B1"}), "deadlock"));
  // W before its I ("Running Backward Weight ... without first running Backward Input").
  EXPECT_TRUE(absl::StartsWith(
      Violation({"0F0,0F1,0I0,0W0,0I1,0W1", "1F0,1W0,1I0,1F1,1I1,1W1"}), "deadlock"));
  // I without W ("I and W must have equal counts").
  EXPECT_TRUE(absl::StartsWith(
      Violation({"0F0,0F1,0I0,0W0,0I1,0W1", "1F0,1I0,1F1,1I1,1W1"}), "completeness"));
  // B mixed with a W of the same micro-batch: torch counts B + (I + W) / 2 != N and
  // I != W; here the B is I then W, and the W comes twice.
  EXPECT_TRUE(absl::StrContains(Violation({"0F0,0B0,0W0"}), "scheduled twice"));
  // A stage on two ranks is refused on import (see ErrorsNameFileLineAndField).
}

// Export then import gives back the same orders (loop and v, full and split).
TEST(TorchCsvTest, RoundTripKeepsOrders) {
  for (const std::vector<std::string>& rows :
       std::vector<std::vector<std::string>>{
           {"0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1", "1F0,1F1,3F0,3B0,3F1,3B1,1B0,1B1"},
           {"0F0,0F1,3F0,3I0,3F1,3I1,0I0,3W0,0I1,3W1,0W0,0W1",
            "1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1"}}) {
    const LoadedSchedule a = Load(Csv(rows));
    auto csv = ScheduleToTorchCsv(a.model, a.schedule);
    ASSERT_TRUE(csv.ok()) << csv.status();
    EXPECT_EQ(*csv, absl::StrJoin(rows, "\r\n") + "\r\n");
    const LoadedSchedule b = Load(*csv);
    EXPECT_EQ(b.model, a.model);
    EXPECT_EQ(b.schedule.order, a.schedule.order);
  }
}

// ---------------------------------------------------------------------------
// Step counts of torch's simulator.
//
// `_simulate_comms_compute` runs a schedule with its SEND/RECV actions in lock
// step: every action takes one step; in each step the ranks, in rank order, run
// their next action if it is ready and idle otherwise; a rank left idle gets a
// second look at the end of the step, so a RECV runs in the step of its SEND
// whichever rank comes first. F needs its RECV_F (or F of the previous stage on
// the same rank), B / I its RECV_B (or the next stage's B / I on the rank), SEND
// its own compute, W nothing. Torch's tests lower compute-only lists with
// `_add_send_recv`: ranks take turns placing their next field (an idle field uses
// up the turn), a placed F / B / I that feeds another rank is followed at once by
// its SEND and puts the RECV at the end of the receiver's list. The count is the
// longest rank's step list.
//
// With `comm_steps` the import does the same lowering and each SEND / RECV is a
// block of span 1; the RECV waits for the end of the compute it receives from,
// which is the start of its SEND since torch's lowering puts the SEND right after
// it. ASAP timing with unit spans then equals the lock-step count.

// Runs `rows` through the import with comm steps and returns the makespan.
int64_t TorchSteps(const std::vector<std::string>& rows, std::string* lowered = nullptr) {
  const LoadedSchedule l = Load(Csv(rows), CommSteps());
  const SimResult sim = Sim(l);
  EXPECT_TRUE(sim.valid) << sim.violation;
  if (lowered != nullptr) {
    auto csv = ScheduleToTorchCsv(l.model, l.schedule);
    EXPECT_TRUE(csv.ok()) << csv.status();
    *lowered = absl::StrReplaceAll(*csv, {{"\r\n", "\n"}});
  }
  return sim.makespan;
}

// torch's test_send_recv "simple_2_rank_2_stage": its lowered lists and 11 steps.
//   step     0   1      2   3      4      5      6      7   8      9      10
//   rank 0   0F0 SEND_F 0F1 SEND_F .      .      RECV_B 0B0 .      RECV_B 0B1
//   rank 1   .   RECV_F .   RECV_F 1F0    1B0    SEND_B 1F1 1B1    SEND_B
TEST(TorchCsvTest, MatchesTorchStepsTwoRanksTwoStages) {
  std::string lowered;
  EXPECT_EQ(TorchSteps({"0F0,0F1,,0B0,,0B1", ",1F0,1B0,1F1,1B1,"}, &lowered), 11);
  EXPECT_EQ(lowered,
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
  // The lowered file read back as torch's compute_comms format runs the same.
  EXPECT_EQ(TorchSteps({"0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1",
                        "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1"}),
            11);
}

// torch's test_send_recv "v_2_rank_4_stage" (written there with B for the input
// backward, as torch then named it; I here): its lowered lists and 24 steps. Stages
// 1 and 2 share rank 1: nothing is sent between them.
TEST(TorchCsvTest, MatchesTorchStepsVTwoRanksFourStages) {
  std::string lowered;
  EXPECT_EQ(TorchSteps({"0F0,0F1,,3F0,3I0,3F1,3I1,0I0,3W0,0I1,3W1,0W0,0W1",
                        ",1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1"},
                       &lowered),
            24);
  EXPECT_EQ(lowered,
            "0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,3SEND_B0,3RECV_F1,3F1,3I1,3SEND_B1,"
            "0RECV_B0,0I0,3W0,0RECV_B1,0I1,3W1,0W0,0W1\n"
            "1RECV_F0,1RECV_F1,1F0,2F0,2SEND_F0,1F1,2RECV_B0,2F1,2SEND_F1,2I0,2RECV_B1,1I0,"
            "1SEND_B0,2I1,1I1,1SEND_B1,2W0,2W1,1W0,1W1\n");
}

// 1F1B as torch's Schedule1F1B lays it out (rank r: r idle steps, R-1-r warmup
// forwards, 2(R-1-r) idle steps, F/B pairs, then idle/B pairs). torch numbers the
// last rank's steady forwards from 1 instead of 0 (its first forward index comes
// from the warmup loop, which the last rank skips); the lists here start at 0.
// Two ranks, 4 micro-batches: after the first round trip each micro-batch costs
// the cycle 0F, 0SEND_F|1RECV_F, 1F, 1B, 1SEND_B|0RECV_B = 5 steps, since rank 0's
// lowered list asks for RECV_B(k) before F(k+1): 0F1 runs at 5, 0F2 at 10, 0F3 at
// 15, then 0SEND_F3 16, 1F3 17, 1B3 18, 0RECV_B3 19, 0B3 20: 21 steps.
TEST(TorchCsvTest, MatchesTorchStepsOneFOneB) {
  EXPECT_EQ(TorchSteps({"0F0,,,0F1,0B0,0F2,0B1,0F3,0B2,,0B3",
                        ",1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"}),
            21);
  // Four ranks, 8 micro-batches: the same rules give 65 steps (middle ranks add
  // their own RECV and SEND steps to the cycle: 7 steps per micro-batch).
  EXPECT_EQ(TorchSteps({"0F0,0F1,0F2,,,,,,,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,,0B5,,0B6,,0B7",
                        ",1F0,1F1,,,,,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,,1B6,,1B7",
                        ",,2F0,,,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,,2B7",
                        ",,,3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7"}),
            65);
}

// Interleaved 1F1B as torch's ScheduleInterleaved1F1B lays it out: 2 ranks, 2
// stages per rank, 2 micro-batches per round (warmup 4 and 2 forwards, stage
// chosen by (step / 2) % 2, idle steps before each cooldown backward): 26 steps
// for 2 micro-batches and 51 for 4.
TEST(TorchCsvTest, MatchesTorchStepsInterleavedOneFOneB) {
  EXPECT_EQ(TorchSteps({"0F0,0F1,2F0,2F1,,,,2B0,,2B1,,0B0,,0B1",
                        ",1F0,1F1,,3F0,3B0,3F1,3B1,,1B0,,1B1"}),
            26);
  EXPECT_EQ(TorchSteps({"0F0,0F1,2F0,2F1,,,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,,2B2,,2B3,,0B2,,0B3",
                        ",1F0,1F1,,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,,1B2,,1B3"}),
            51);
}

// torch's ZB1P artifact (zb1p_2rank_2stagep_compute.csv: 2 ranks, 4 stages, 8
// micro-batches, written with B for the input backward as torch then named it)
// runs in 113 steps in torch's test_csv; read with I for that B, so do we. As
// written (B beside W), torch's validator rejects it today and so does Simulate.
TEST(TorchCsvTest, MatchesTorchStepsZeroBubble) {
  const std::vector<std::string> zb = {
      "0F0,0F1,2F0,,2F1,2B0,2W0,0F2,2B1,2W1,0F3,0B0,0W0,2F2,0B1,0W1,2F3,2B2,2W2,0F4,2B3,2W3,"
      "0F5,0B2,0W2,2F4,0B3,0W3,2F5,2B4,2W4,0F6,2B5,2W5,0F7,0B4,0W4,2F6,0B5,0W5,2F7,2B6,2W6,"
      "2B7,2W7,0B6,0W6,0B7,0W7",
      ",1F0,1F1,3F0,3B0,3F1,3B1,3W0,1F2,1B0,3W1,1F3,1B1,1W0,3F2,3B2,1W1,3F3,3B3,3W2,1F4,1B2,"
      "3W3,1F5,1B3,1W2,3F4,3B4,1W3,3F5,3B5,3W4,1F6,1B4,3W5,1F7,1B5,1W4,3F6,3B6,1W5,3F7,3B7,"
      "3W6,1B6,3W7,1B7,1W6,1W7"};
  EXPECT_TRUE(absl::StrContains(Violation(zb), "scheduled twice"));
  std::vector<std::string> zb_i;
  for (const std::string& row : zb) zb_i.push_back(absl::StrReplaceAll(row, {{"B", "I"}}));
  EXPECT_EQ(TorchSteps(zb_i), 113);
}

}  // namespace
}  // namespace loom::schedule
