#ifndef LOOM_SCHEDULE_RENDER_H_
#define LOOM_SCHEDULE_RENDER_H_

// Pictures of a timed schedule: a Chrome trace (Perfetto, chrome://tracing) and an
// SVG Gantt chart. Both read the start times of a SimResult; a result without
// them (an invalid schedule) gives a trace with its metadata only and a chart
// with its title and the violation.

#include <string>

#include "absl/strings/string_view.h"
#include "schedule/block_model.h"
#include "schedule/schedule.h"

namespace loom::schedule {

// Chrome trace event JSON ({"traceEvents": [...]}): process 0 named after the
// model, one thread per device ("device d"), one complete ("X") event per block
// instance per device it runs on (name = block name, category = kind, args:
// micro-batch, kind, stage, memory delta), and one counter track per device
// ("memory device d") with the running memory level after each instance starts.
// One time unit of the schedule is `microseconds_per_unit` microseconds.
std::string ScheduleToChromeTrace(const BlockModel& model, const Schedule& schedule,
                                  const SimResult& sim, double microseconds_per_unit = 1000);

struct SvgOptions {
  // Width the time axis aims for; the scale is clamped to the two limits below,
  // so a short schedule is not blown up and a long one still gets a usable width.
  int target_width = 2000;
  double min_px_per_unit = 0.5;
  double max_px_per_unit = 48.0;
  int row_height = 28;
  bool legend = true;
  // Replaces the first title line (model and schedule names) when not empty.
  std::string title;
};

// SVG Gantt chart: a title (model, schedule, micro-batches, makespan, bubble ratio,
// peak memory per device), one row per device with its idle share and peak, a time
// axis with round ticks, one box per instance per device (class "blk", coloured by
// block: blues for forward, greens for backward and backward-input, oranges for
// weight backward, greys and purples for other blocks, a shade per stage), the
// micro-batch number in each box wide enough for it, and a legend of the blocks.
std::string ScheduleToSvg(const BlockModel& model, const Schedule& schedule,
                          const SimResult& sim, const SvgOptions& options = {});

// `s` with & < > " ' replaced by XML entities.
std::string XmlEscape(absl::string_view s);

}  // namespace loom::schedule

#endif  // LOOM_SCHEDULE_RENDER_H_
