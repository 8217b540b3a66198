#ifndef LOOM_SCHEDULE_TORCH_CSV_H_
#define LOOM_SCHEDULE_TORCH_CSV_H_

// The per-rank schedule CSV of torch.distributed.pipelining (what its schedules'
// `_dump_csv` writes and `_load_csv` reads): one row per rank, in rank order, each
// field one action `{stage}{type}{micro-batch}`:
//
//   0F0,0F1,,0B0,,0B1
//   ,1F0,1B0,1F1,1B1
//
// Compute types: F forward, B full backward, I backward for the input gradient, W
// backward for the weights; an empty field is an idle step (torch's None). The
// communication types SEND_F, RECV_F, SEND_B, RECV_B (torch's "compute_comms"
// format), the FSDP actions UNSHARD and RESHARD and REDUCE_GRAD (no micro-batch:
// `1UNSHARD`) are accepted; `(0F7;7B3)OVERLAP_F_B` runs its sub-actions in order.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedule/block_model.h"
#include "schedule/placements.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// The CSV of a pipeline-stage schedule: device d is rank d, each instance of a
// block with a stage and an action letter (F, B, I, W) is `{stage}{letter}{mb}`;
// the communication blocks of an import with `comm_steps` are written back as
// their actions (`0SEND_F3`). Rows end in "\r\n" as Python's csv module writes
// them. With `sim` (start times of the schedule), each action sits in the column
// of its start time and the columns before it are empty fields: torch's time-step
// grid when every span is 1. Errors: a block with no stage, of kind `other` (not a
// communication block), or on more than one device.
absl::StatusOr<std::string> ScheduleToTorchCsv(const BlockModel& model, const Schedule& schedule,
                                               const SimResult* sim = nullptr);

struct TorchImportOptions {
  // Spans, communication lag and memory of the stage model. Whether the backward is
  // split comes from the file: with I or W actions a weight backward of 0 is taken
  // as 1; with B actions only it is ignored.
  StageCosts costs;
  // Time torch's schedule simulator (`_simulate_comms_compute`) gives communication:
  // every transfer between stages on different ranks is a SEND step on the sender
  // (after its F / B / I) and a RECV step on the receiver (before the dependent
  // action), each one time unit; the receive may run in the time step the send
  // runs in. The model then holds blocks SEND_F<s>, RECV_F<s>, SEND_B<s>, RECV_B<s>
  // and `costs.comm` is not used. Communication actions in the file are kept in
  // place; a compute-only file gets them where torch's lowering (`_add_send_recv`)
  // puts them. Without this, communication actions are skipped.
  bool comm_steps = false;
};

// Reads a torch CSV into a stage model (MakeStageModel) and its schedule. Infers
// ranks (rows), stages (0..max), micro-batches (0..max), the stage -> rank mapping
// ("loop": stage s on rank s % ranks; "v": 2 stages per rank, down then back up;
// anything else is an error) and whether the backward is split (I/W) or full (B).
// In a split model a B action is its I then its W, back to back (torch's
// `_merge_bw` in reverse). UNSHARD, RESHARD and REDUCE_GRAD are skipped, and so are
// SEND/RECV actions unless `comm_steps`. Errors name the file, the line (rank + 1)
// and the field: `sched.csv:2:5: unknown action 'X3F'`. The order itself is not
// checked here: Simulate tells a missing, repeated or misordered action.
absl::StatusOr<LoadedSchedule> ScheduleFromTorchCsv(absl::string_view text,
                                                    absl::string_view filename = "<csv>",
                                                    const TorchImportOptions& options = {});

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_TORCH_CSV_H_
