#include "schedule/render.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/json_util.h"

namespace loom::schedule {
namespace {

// ---------------------------------------------------------------------------
// Chrome trace

ir::OrderedJson Metadata(absl::string_view what, int tid, const ir::OrderedJson& args) {
  ir::OrderedJson e;
  e["name"] = what;
  e["ph"] = "M";
  e["pid"] = 0;
  if (tid >= 0) e["tid"] = tid;
  e["args"] = args;
  return e;
}

// ---------------------------------------------------------------------------
// Colours

struct Rgb {
  int r = 0, g = 0, b = 0;
};

Rgb FromHsl(double h, double s, double l) {
  h = std::fmod(h, 360.0);
  if (h < 0) h += 360.0;
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double x = c * (1 - std::fabs(std::fmod(h / 60.0, 2.0) - 1));
  const double m = l - c / 2;
  double r = 0, g = 0, b = 0;
  if (h < 60) {
    r = c, g = x;
  } else if (h < 120) {
    r = x, g = c;
  } else if (h < 180) {
    g = c, b = x;
  } else if (h < 240) {
    g = x, b = c;
  } else if (h < 300) {
    r = x, b = c;
  } else {
    r = c, b = x;
  }
  auto to = [&](double v) { return static_cast<int>(std::lround((v + m) * 255)); };
  return Rgb{to(r), to(g), to(b)};
}

std::string Hex(const Rgb& c) { return absl::StrFormat("#%02x%02x%02x", c.r, c.g, c.b); }

bool IsDark(const Rgb& c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 140; }

// Per block: a hue family by kind, a shade by stage (or by rank among the blocks
// of its kind when blocks have no stage).
std::vector<Rgb> BlockColours(const BlockModel& model) {
  const int n = model.num_blocks();
  std::map<BlockKind, std::vector<int>> keys;  // kind -> sorted distinct shade keys
  std::vector<int> key(n);
  std::map<BlockKind, int> ordinal;
  for (int b = 0; b < n; ++b) {
    const Block& block = model.blocks[b];
    key[b] = block.stage >= 0 ? block.stage : ordinal[block.kind]++;
    keys[block.kind].push_back(key[b]);
  }
  for (auto& [kind, list] : keys) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  std::vector<Rgb> colours(n);
  for (int b = 0; b < n; ++b) {
    const BlockKind kind = model.blocks[b].kind;
    const std::vector<int>& list = keys[kind];
    const int i = static_cast<int>(std::lower_bound(list.begin(), list.end(), key[b]) - list.begin());
    const double t = list.size() > 1 ? static_cast<double>(i) / (list.size() - 1) : 0.5;
    switch (kind) {
      case BlockKind::kForward:
        colours[b] = FromHsl(200 + 18 * t, 0.75, 0.28 + 0.42 * t);
        break;
      case BlockKind::kBackward:
      case BlockKind::kBackwardInput:
        colours[b] = FromHsl(150 - 55 * t, 0.55, 0.27 + 0.38 * t);
        break;
      case BlockKind::kBackwardWeight:
        colours[b] = FromHsl(16 + 22 * t, 0.88, 0.45 + 0.21 * t);
        break;
      case BlockKind::kOther:
        colours[b] = FromHsl(265 + 137.5 * i, 0.35, 0.52);
        break;
    }
  }
  return colours;
}

// ---------------------------------------------------------------------------
// SVG helpers

std::string Num(double v) {
  if (std::fabs(v - std::round(v)) < 1e-9) return absl::StrCat(static_cast<int64_t>(std::round(v)));
  return absl::StrFormat("%.2f", v);
}

int64_t NiceStep(double min_units) {
  int64_t magnitude = 1;
  while (true) {
    for (int64_t f : {1, 2, 5}) {
      if (f * magnitude >= min_units) return f * magnitude;
    }
    if (magnitude > std::numeric_limits<int64_t>::max() / 100) return magnitude * 10;
    magnitude *= 10;
  }
}

// Approximate advance width of `chars` characters at `font` px (sans-serif digits).
double TextWidth(size_t chars, double font) { return static_cast<double>(chars) * font * 0.6; }

std::string Percent(double share) { return absl::StrFormat("%.1f%%", 100.0 * share); }

}  // namespace

std::string XmlEscape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ScheduleToChromeTrace(const BlockModel& model, const Schedule& schedule,
                                  const SimResult& sim, double microseconds_per_unit) {
  const int n = model.num_blocks();
  ir::OrderedJson events = ir::OrderedJson::array();
  events.push_back(Metadata("process_name", -1, {{"name", model.name.empty() ? "schedule" : model.name}}));
  for (int d = 0; d < model.num_devices; ++d) {
    events.push_back(Metadata("thread_name", d, {{"name", absl::StrCat("device ", d)}}));
    events.push_back(Metadata("thread_sort_index", d, {{"sort_index", d}}));
  }
  const bool timed = sim.start.size() == static_cast<size_t>(n) * schedule.microbatches &&
                     static_cast<int>(schedule.order.size()) == model.num_devices;
  if (timed) {
    for (int d = 0; d < model.num_devices; ++d) {
      int64_t level = 0;
      ir::OrderedJson counter0;
      counter0["name"] = absl::StrCat("memory device ", d);
      counter0["ph"] = "C";
      counter0["pid"] = 0;
      counter0["ts"] = 0;
      counter0["args"] = {{"memory", 0}};
      events.push_back(counter0);
      for (const Instance& x : schedule.order[d]) {
        if (x.block < 0 || x.block >= n || x.microbatch < 0 || x.microbatch >= schedule.microbatches) {
          continue;
        }
        const Block& b = model.blocks[x.block];
        const double ts = static_cast<double>(sim.start[x.microbatch * n + x.block]) *
                          microseconds_per_unit;
        ir::OrderedJson e;
        e["name"] = b.name;
        e["cat"] = BlockKindName(b.kind);
        e["ph"] = "X";
        e["pid"] = 0;
        e["tid"] = d;
        e["ts"] = ts;
        e["dur"] = static_cast<double>(b.span) * microseconds_per_unit;
        ir::OrderedJson args;
        args["microbatch"] = x.microbatch;
        args["kind"] = BlockKindName(b.kind);
        if (b.stage >= 0) args["stage"] = b.stage;
        args["memory"] = b.memory;
        e["args"] = args;
        events.push_back(e);
        if (b.memory != 0) {
          level += b.memory;
          ir::OrderedJson c;
          c["name"] = absl::StrCat("memory device ", d);
          c["ph"] = "C";
          c["pid"] = 0;
          c["ts"] = ts;
          c["args"] = {{"memory", level}};
          events.push_back(c);
        }
      }
    }
  }
  ir::OrderedJson j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  ir::OrderedJson other;
  other["model"] = model.name;
  other["schedule"] = schedule.name;
  other["microbatches"] = schedule.microbatches;
  if (sim.valid) {
    other["makespan"] = sim.makespan;
    other["bubble_ratio"] = sim.bubble_ratio;
    other["peak_memory"] = sim.peak_memory;
  } else {
    other["violation"] = sim.violation;
  }
  j["otherData"] = other;
  return ir::DumpJson(j);
}

namespace {

// Where the Gantt chart's parts go: the time span drawn, its scale in pixels per
// unit, the margins, rows and axis.
struct ChartLayout {
  // Whether the simulation gives every instance a start (else no boxes are drawn).
  bool timed = false;
  int64_t t0 = 0, t1 = 1;
  double ppu = 1;
  double chart_w = 0;
  double left = 86, right = 170, top = 62;
  double row_h = 8;
  double pitch = 14;
  double width = 960;
  double rows_bottom = 0;
  double axis_y = 0;

  double X(int64_t t) const { return left + static_cast<double>(t - t0) * ppu; }
};

ChartLayout LayoutChart(const BlockModel& model, const Schedule& schedule, const SimResult& sim,
                        const SvgOptions& options) {
  const int n = model.num_blocks();
  const int devices = model.num_devices;
  ChartLayout c;
  c.timed = sim.start.size() == static_cast<size_t>(n) * schedule.microbatches &&
            static_cast<int>(schedule.order.size()) == devices && n > 0;
  if (c.timed) {
    c.t0 = std::numeric_limits<int64_t>::max();
    c.t1 = std::numeric_limits<int64_t>::min();
    for (size_t id = 0; id < sim.start.size(); ++id) {
      c.t0 = std::min(c.t0, sim.start[id]);
      c.t1 = std::max(c.t1, sim.start[id] + model.blocks[id % n].span);
    }
  }
  const double units = static_cast<double>(std::max<int64_t>(1, c.t1 - c.t0));
  // At most kMaxChartPx wide, whatever the minimum pixels per unit ask (a chart
  // of a long schedule scales down rather than growing without bound).
  constexpr double kMaxChartPx = 100000;
  c.ppu = std::min(kMaxChartPx / units,
                   std::clamp(options.target_width / units, options.min_px_per_unit,
                              std::max(options.min_px_per_unit, options.max_px_per_unit)));
  c.chart_w = units * c.ppu;
  c.row_h = std::max(8, options.row_height);
  c.pitch = c.row_h + 6;
  c.width = std::max(960.0, c.left + c.chart_w + c.right);
  c.rows_bottom = c.top + c.pitch * devices;
  c.axis_y = c.rows_bottom + 2;
  return c;
}

// The two title lines: model and schedule (or the options' title), then the
// figures of the simulation.
std::string SvgTitle(const BlockModel& model, const Schedule& schedule, const SimResult& sim,
                     const SvgOptions& options) {
  std::string line1 = options.title;
  if (line1.empty()) {
    line1 = absl::StrCat(model.name.empty() ? "model" : model.name, " \u00b7 ",
                         schedule.name.empty() ? "schedule" : schedule.name);
  }
  std::string line2 = absl::StrCat(schedule.microbatches, " micro-batches \u00b7 ",
                                   model.num_devices, " devices");
  if (sim.valid) {
    std::vector<std::string> peaks;
    for (int64_t p : sim.peak_memory) peaks.push_back(absl::StrCat(p));
    absl::StrAppend(&line2, " \u00b7 makespan ", sim.makespan, " \u00b7 bubble ",
                    Percent(sim.bubble_ratio), " \u00b7 peak memory [", absl::StrJoin(peaks, ", "),
                    "]");
  } else {
    absl::StrAppend(&line2, " \u00b7 invalid: ", sim.violation);
  }
  return absl::StrCat("<text x=\"16\" y=\"24\" class=\"title\">", XmlEscape(line1), "</text>\n",
                      "<text x=\"16\" y=\"45\" class=\"sub\">", XmlEscape(line2), "</text>\n");
}

// The grid lines, one row per device with its idle share and peak memory, and
// the time axis.
std::string SvgRowsAndAxis(const ChartLayout& c, const SimResult& sim, int devices) {
  std::string body;
  const int64_t step = NiceStep(64.0 / c.ppu);
  absl::StrAppend(&body, "<g class=\"grid\">\n");
  for (int64_t t = (c.t0 + step - 1) / step * step; t <= c.t1; t += step) {
    absl::StrAppend(&body, "<line x1=\"", Num(c.X(t)), "\" y1=\"", Num(c.top - 4), "\" x2=\"",
                    Num(c.X(t)), "\" y2=\"", Num(c.rows_bottom), "\"/>\n");
  }
  absl::StrAppend(&body, "</g>\n");
  for (int d = 0; d < devices; ++d) {
    const double y = c.top + c.pitch * d;
    absl::StrAppend(&body, "<rect class=\"row\" x=\"", Num(c.left), "\" y=\"", Num(y),
                    "\" width=\"", Num(c.chart_w), "\" height=\"", Num(c.row_h), "\"/>\n");
    absl::StrAppend(&body, "<text class=\"dev\" x=\"", Num(c.left - 8), "\" y=\"",
                    Num(y + c.row_h / 2 + 4), "\">device ", d, "</text>\n");
    if (sim.valid && d < static_cast<int>(sim.bubble.size())) {
      absl::StrAppend(&body, "<text class=\"stat\" x=\"", Num(c.left + c.chart_w + 10), "\" y=\"",
                      Num(y + c.row_h / 2 + 4), "\">idle ", Percent(sim.bubble[d]),
                      " \u00b7 peak ", sim.peak_memory[d], "</text>\n");
    }
  }
  absl::StrAppend(&body, "<g class=\"axis\">\n<line x1=\"", Num(c.left), "\" y1=\"",
                  Num(c.axis_y), "\" x2=\"", Num(c.left + c.chart_w), "\" y2=\"", Num(c.axis_y),
                  "\"/>\n");
  for (int64_t t = (c.t0 + step - 1) / step * step; t <= c.t1; t += step) {
    absl::StrAppend(&body, "<line x1=\"", Num(c.X(t)), "\" y1=\"", Num(c.axis_y), "\" x2=\"",
                    Num(c.X(t)), "\" y2=\"", Num(c.axis_y + 5), "\"/><text x=\"", Num(c.X(t)),
                    "\" y=\"", Num(c.axis_y + 18), "\">", t, "</text>\n");
  }
  absl::StrAppend(&body, "</g>\n<text class=\"stat\" x=\"", Num(c.left + c.chart_w + 10),
                  "\" y=\"", Num(c.axis_y + 18), "\">time</text>\n");
  return body;
}

// One box per instance, in its block's colour, labelled with its micro-batch
// where the label fits.
std::string SvgBoxes(const BlockModel& model, const Schedule& schedule, const SimResult& sim,
                     const ChartLayout& c, const std::vector<Rgb>& colours) {
  const int n = model.num_blocks();
  std::string body;
  absl::StrAppend(&body, "<g class=\"boxes\">\n");
  for (int d = 0; d < model.num_devices; ++d) {
    const double y = c.top + c.pitch * d;
    for (const Instance& x : schedule.order[d]) {
      if (x.block < 0 || x.block >= n || x.microbatch < 0 ||
          x.microbatch >= schedule.microbatches) {
        continue;
      }
      const Block& b = model.blocks[x.block];
      const int64_t start = sim.start[x.microbatch * n + x.block];
      const double bx = c.X(start), bw = static_cast<double>(b.span) * c.ppu;
      const Rgb& colour = colours[x.block];
      absl::StrAppend(&body, "<rect class=\"blk\" x=\"", Num(bx), "\" y=\"", Num(y),
                      "\" width=\"", Num(bw), "\" height=\"", Num(c.row_h), "\" fill=\"",
                      Hex(colour), "\"", bw >= 4 ? "" : " stroke=\"none\"", "><title>",
                      XmlEscape(InstanceLabel(model, x)), " [", start, ", ", start + b.span,
                      ")</title></rect>\n");
      const std::string label = absl::StrCat(x.microbatch);
      double font = std::min(13.0, c.row_h * 0.55);
      font = std::min(font, (bw - 3) / (0.6 * label.size()));
      if (font >= 7.0) {
        absl::StrAppend(&body, "<text class=\"mb\" x=\"", Num(bx + bw / 2), "\" y=\"",
                        Num(y + c.row_h / 2 + font * 0.36), "\" font-size=\"",
                        Num(std::floor(font)), "\" fill=\"",
                        IsDark(colour) ? "#ffffff" : "#111111", "\">", label, "</text>\n");
      }
    }
  }
  absl::StrAppend(&body, "</g>\n");
  return body;
}

// The legend: one swatch per block (the first 96), wrapped to the width, below
// *y_end, which it moves past itself.
std::string SvgLegend(const BlockModel& model, const ChartLayout& c,
                      const std::vector<Rgb>& colours, double* y_end) {
  const int n = model.num_blocks();
  std::string body;
  double lx = c.left, ly = *y_end + 6;
  const int shown = std::min(n, 96);
  absl::StrAppend(&body, "<g class=\"legend\">\n");
  for (int b = 0; b < shown; ++b) {
    const std::string& name = model.blocks[b].name;
    const double w = 18 + TextWidth(name.size(), 12) + 16;
    if (lx + w > c.width - 16 && lx > c.left) {
      lx = c.left;
      ly += 20;
    }
    absl::StrAppend(&body, "<rect class=\"sw\" x=\"", Num(lx), "\" y=\"", Num(ly - 11),
                    "\" width=\"13\" height=\"13\" fill=\"", Hex(colours[b]), "\"/><text x=\"",
                    Num(lx + 18), "\" y=\"", Num(ly), "\">", XmlEscape(name), "</text>\n");
    lx += w;
  }
  if (shown < n) {
    absl::StrAppend(&body, "<text x=\"", Num(lx), "\" y=\"", Num(ly), "\">\u2026 ", n - shown,
                    " more</text>\n");
  }
  absl::StrAppend(&body, "<text class=\"stat\" x=\"16\" y=\"", Num(*y_end + 6),
                  "\">blocks</text>\n</g>\n");
  *y_end = ly + 14;
  return body;
}

// The SVG document around `body`, with its style sheet.
std::string SvgDocument(double width, double height, const std::string& body) {
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", Num(std::ceil(width)), "\" height=\"",
      Num(std::ceil(height)), "\" viewBox=\"0 0 ", Num(std::ceil(width)), " ",
      Num(std::ceil(height)), "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      "<style>\n",
      ".title{font-size:17px;font-weight:bold;fill:#222}\n",
      ".sub{font-size:13px;fill:#444}\n",
      ".dev{font-size:12px;fill:#333;text-anchor:end}\n",
      ".stat{font-size:11px;fill:#666}\n",
      ".row{fill:#f4f5f7}\n",
      ".grid line{stroke:#dde0e5;stroke-width:1}\n",
      ".axis line{stroke:#666;stroke-width:1}\n",
      ".axis text{font-size:11px;fill:#444;text-anchor:middle}\n",
      ".blk{stroke:#ffffff;stroke-width:0.6}\n",
      ".mb{text-anchor:middle}\n",
      ".legend text{font-size:12px;fill:#333}\n",
      ".sw{stroke:#888;stroke-width:0.5}\n",
      "</style>\n",
      "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n", body, "</svg>\n");
}

}  // namespace

std::string ScheduleToSvg(const BlockModel& model, const Schedule& schedule, const SimResult& sim,
                          const SvgOptions& options) {
  const ChartLayout layout = LayoutChart(model, schedule, sim, options);
  const std::vector<Rgb> colours = BlockColours(model);
  std::string body = SvgTitle(model, schedule, sim, options);
  absl::StrAppend(&body, SvgRowsAndAxis(layout, sim, model.num_devices));
  if (layout.timed) absl::StrAppend(&body, SvgBoxes(model, schedule, sim, layout, colours));
  double y_end = layout.axis_y + 30;
  if (options.legend && model.num_blocks() > 0) {
    absl::StrAppend(&body, SvgLegend(model, layout, colours, &y_end));
  }
  const double height = y_end + 8;
  return SvgDocument(layout.width, height, body);
}

}  // namespace loom::schedule
