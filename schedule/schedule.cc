#include "schedule/schedule.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/json_util.h"
#include "ir/status_macros.h"

namespace loom::schedule {
namespace {

constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();

std::string Label(const BlockModel& model, int instance) {
  const int n = model.num_blocks();
  return InstanceLabel(model, Instance{instance % n, instance / n});
}

// Slot of (instance, device index k within its block's devices) in a flat array.
class Slots {
 public:
  explicit Slots(const BlockModel& model) : per_mb_(0) {
    offset_.reserve(model.num_blocks());
    for (const Block& b : model.blocks) {
      offset_.push_back(per_mb_);
      per_mb_ += static_cast<int>(b.devices.size());
    }
  }
  int size(int microbatches) const { return per_mb_ * microbatches; }
  int Of(int block, int microbatch, int k) const {
    return microbatch * per_mb_ + offset_[block] + k;
  }

 private:
  int per_mb_;
  std::vector<int> offset_;
};

int DeviceIndex(const Block& block, int device) {
  auto it = std::lower_bound(block.devices.begin(), block.devices.end(), device);
  if (it == block.devices.end() || *it != device) return -1;
  return static_cast<int>(it - block.devices.begin());
}

// Every instance exactly once on each of its devices and nowhere else. Returns the
// violation text, empty when complete.
std::string CheckCompleteness(const BlockModel& model, const Schedule& s) {
  const Slots slots(model);
  std::vector<char> seen(slots.size(s.microbatches), 0);
  for (int d = 0; d < model.num_devices; ++d) {
    for (const Instance& x : s.order[d]) {
      const int k = DeviceIndex(model.blocks[x.block], d);
      if (k < 0) {
        return absl::StrCat("placement: '", InstanceLabel(model, x), "' is ordered on device ", d,
                            ", which its block does not run on");
      }
      char& mark = seen[slots.Of(x.block, x.microbatch, k)];
      if (mark) {
        return absl::StrCat("completeness: '", InstanceLabel(model, x),
                            "' is scheduled twice on device ", d);
      }
      mark = 1;
    }
  }
  for (int m = 0; m < s.microbatches; ++m) {
    for (int b = 0; b < model.num_blocks(); ++b) {
      const Block& block = model.blocks[b];
      for (size_t k = 0; k < block.devices.size(); ++k) {
        if (!seen[slots.Of(b, m, static_cast<int>(k))]) {
          return absl::StrCat("completeness: '", InstanceLabel(model, Instance{b, m}),
                              "' is not scheduled on device ", block.devices[k]);
        }
      }
    }
  }
  return "";
}

// As-soon-as-possible start times with the given device orders, or the deadlock
// cycle when the orders cannot all make progress.
std::string AsapTimes(const BlockModel& model, const Schedule& s, std::vector<int64_t>& start) {
  const int n = model.num_blocks();
  const int total = n * s.microbatches;
  // Device predecessor of each instance on each of its devices.
  const Slots slots(model);
  std::vector<int> device_prev(slots.size(s.microbatches), -1);
  std::vector<std::vector<int>> device_next(total);
  std::vector<int> waiting(total, 0);
  for (int d = 0; d < model.num_devices; ++d) {
    int prev = -1;
    for (const Instance& x : s.order[d]) {
      const int id = x.microbatch * n + x.block;
      device_prev[slots.Of(x.block, x.microbatch, DeviceIndex(model.blocks[x.block], d))] = prev;
      if (prev >= 0) {
        device_next[prev].push_back(id);
        ++waiting[id];
      }
      prev = id;
    }
  }
  std::vector<std::vector<int>> succs(n);
  for (int b = 0; b < n; ++b) {
    for (const Dep& p : model.blocks[b].preds) succs[p.block].push_back(b);
  }
  for (int id = 0; id < total; ++id) waiting[id] += model.blocks[id % n].preds.size();
  start.assign(total, 0);
  std::vector<int> ready;
  for (int id = 0; id < total; ++id) {
    if (waiting[id] == 0) ready.push_back(id);
  }
  std::vector<char> done(total, 0);
  int processed = 0;
  while (!ready.empty()) {
    const int id = ready.back();
    ready.pop_back();
    done[id] = 1;
    ++processed;
    const int b = id % n, m = id / n;
    const int64_t end = start[id] + model.blocks[b].span;
    for (int next : device_next[id]) {
      start[next] = std::max(start[next], end);
      if (--waiting[next] == 0) ready.push_back(next);
    }
    for (int sb : succs[b]) {
      const int next = m * n + sb;
      int64_t lag = 0;
      for (const Dep& p : model.blocks[sb].preds) {
        if (p.block == b) lag = std::max(lag, p.lag);
      }
      start[next] = std::max(start[next], end + lag);
      // A block listed twice as a predecessor is counted twice in `waiting`.
      for (const Dep& p : model.blocks[sb].preds) {
        if (p.block == b && --waiting[next] == 0) ready.push_back(next);
      }
    }
  }
  if (processed == total) return "";
  // Deadlock: follow "waits for" links from a stuck instance until one repeats.
  auto blocker = [&](int id, std::string& why) {
    const int b = id % n, m = id / n;
    for (const Dep& p : model.blocks[b].preds) {
      if (!done[m * n + p.block]) {
        why = "its dependency";
        return m * n + p.block;
      }
    }
    const Block& block = model.blocks[b];
    for (size_t k = 0; k < block.devices.size(); ++k) {
      const int prev = device_prev[slots.Of(b, m, static_cast<int>(k))];
      if (prev >= 0 && !done[prev]) {
        why = absl::StrCat("before it on device ", block.devices[k]);
        return prev;
      }
    }
    return -1;
  };
  int cur = 0;
  while (done[cur]) ++cur;
  std::vector<int> visit_step(total, -1);
  std::vector<std::pair<int, std::string>> path;
  while (cur >= 0 && visit_step[cur] < 0) {
    visit_step[cur] = static_cast<int>(path.size());
    std::string why;
    const int next = blocker(cur, why);
    path.push_back({cur, why});
    cur = next;
  }
  std::vector<std::string> parts;
  std::vector<int> devices;
  for (size_t i = cur < 0 ? 0 : visit_step[cur]; i < path.size(); ++i) {
    const auto& [id, why] = path[i];
    const std::string next = i + 1 < path.size() ? Label(model, path[i + 1].first)
                                                 : (cur >= 0 ? Label(model, cur) : "?");
    parts.push_back(absl::StrCat("'", Label(model, id), "' waits for '", next, "' (", why, ")"));
    for (int d : model.blocks[id % n].devices) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return absl::StrCat("deadlock on devices ", absl::StrJoin(devices, ", "), ": ",
                      absl::StrJoin(parts, "; "));
}

// Explicit times: device order kept, no overlap, dependencies and lags respected.
std::string CheckTimes(const BlockModel& model, const Schedule& s) {
  const int n = model.num_blocks();
  for (int d = 0; d < model.num_devices; ++d) {
    const std::vector<Instance>& order = s.order[d];
    for (size_t i = 1; i < order.size(); ++i) {
      const int a = order[i - 1].microbatch * n + order[i - 1].block;
      const int b = order[i].microbatch * n + order[i].block;
      const int64_t end = s.start[a] + model.blocks[order[i - 1].block].span;
      if (s.start[b] < end) {
        return absl::StrCat("device ", d, ": '", Label(model, b), "' starts at ", s.start[b],
                            " before '", Label(model, a), "' (ordered before it) ends at ", end);
      }
    }
  }
  for (int m = 0; m < s.microbatches; ++m) {
    for (int b = 0; b < n; ++b) {
      for (const Dep& p : model.blocks[b].preds) {
        const int64_t ready = s.start[m * n + p.block] + model.blocks[p.block].span + p.lag;
        if (s.start[m * n + b] < ready) {
          return absl::StrCat("dependency: '", Label(model, m * n + b), "' starts at ",
                              s.start[m * n + b], " before '", Label(model, m * n + p.block),
                              "' is ready for it at ", ready);
        }
      }
    }
  }
  return "";
}

}  // namespace

std::string ObjectiveName(Objective objective) {
  return objective == Objective::kSpan ? "span" : "makespan";
}

absl::StatusOr<Objective> ParseObjective(absl::string_view name) {
  if (name == "makespan") return Objective::kMakespan;
  if (name == "span") return Objective::kSpan;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown objective '", name, "' (makespan or span)"));
}

int64_t ObjectiveValue(Objective objective, const SimResult& sim) {
  return objective == Objective::kSpan ? sim.span : sim.makespan;
}

std::string InstanceLabel(const BlockModel& model, const Instance& instance) {
  return absl::StrCat(model.blocks[instance.block].name, ".", instance.microbatch);
}

absl::StatusOr<SimResult> Simulate(const BlockModel& model, const Schedule& schedule) {
  LOOM_RETURN_IF_ERROR(ValidateBlockModel(model));
  if (schedule.microbatches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule: micro-batch count must be positive, got ", schedule.microbatches));
  }
  if (static_cast<int>(schedule.order.size()) != model.num_devices) {
    return absl::InvalidArgumentError(absl::StrCat("schedule: orders for ", schedule.order.size(),
                                                   " devices, the model has ", model.num_devices));
  }
  const int n = model.num_blocks();
  const int64_t total = int64_t{n} * schedule.microbatches;
  if (total > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule: ", total, " block instances is more than this tool holds"));
  }
  for (int d = 0; d < model.num_devices; ++d) {
    for (size_t i = 0; i < schedule.order[d].size(); ++i) {
      const Instance& x = schedule.order[d][i];
      if (x.block < 0 || x.block >= n || x.microbatch < 0 ||
          x.microbatch >= schedule.microbatches) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule: device ", d, " entry ", i, ": block ", x.block, " micro-batch ",
            x.microbatch, " is out of range (", n, " blocks, ", schedule.microbatches,
            " micro-batches)"));
      }
    }
  }
  if (!schedule.start.empty() && static_cast<int64_t>(schedule.start.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("schedule: ", schedule.start.size(),
                                                   " start times for ", total, " instances"));
  }
  SimResult r;
  r.violation = CheckCompleteness(model, schedule);
  if (!r.violation.empty()) return r;
  if (schedule.start.empty()) {
    r.violation = AsapTimes(model, schedule, r.start);
  } else {
    r.violation = CheckTimes(model, schedule);
    r.start = schedule.start;
  }
  if (!r.violation.empty()) {
    r.start.clear();
    return r;
  }
  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  for (int64_t id = 0; id < total; ++id) {
    first = std::min(first, r.start[id]);
    last = std::max(last, r.start[id] + model.blocks[id % n].span);
  }
  r.makespan = last - first;
  r.busy.assign(model.num_devices, 0);
  r.peak_memory.assign(model.num_devices, 0);
  r.bubble.assign(model.num_devices, 0);
  int64_t busy_total = 0;
  for (int d = 0; d < model.num_devices; ++d) {
    int64_t level = 0;
    for (const Instance& x : schedule.order[d]) {
      const Block& b = model.blocks[x.block];
      r.busy[d] += b.span;
      level += b.memory;
      r.peak_memory[d] = std::max(r.peak_memory[d], level);
      if (model.has_cap() && level > model.memory_cap[d] && r.violation.empty()) {
        r.violation = absl::StrCat("memory: device ", d, " reaches ", level, " at '",
                                   InstanceLabel(model, x), "' (time ",
                                   r.start[x.microbatch * n + x.block], "), above its cap ",
                                   model.memory_cap[d]);
      }
    }
    busy_total += r.busy[d];
    if (!schedule.order[d].empty()) {
      int64_t device_first = std::numeric_limits<int64_t>::max(), device_last = 0;
      for (const Instance& x : schedule.order[d]) {
        const int64_t s = r.start[x.microbatch * n + x.block];
        device_first = std::min(device_first, s);
        device_last = std::max(device_last, s + model.blocks[x.block].span);
      }
      r.span = std::max(r.span, device_last - device_first);
    }
    r.bubble[d] = r.makespan > 0 ? 1.0 - static_cast<double>(r.busy[d]) / r.makespan : 0.0;
  }
  r.bubble_ratio = r.makespan > 0 ? 1.0 - static_cast<double>(busy_total) /
                                              (static_cast<double>(r.makespan) * model.num_devices)
                                  : 0.0;
  r.span_bubble_ratio =
      r.span > 0 ? 1.0 - static_cast<double>(busy_total) /
                             (static_cast<double>(r.span) * model.num_devices)
                 : 0.0;
  r.valid = r.violation.empty();
  return r;
}

Schedule ScheduleFromTimes(const BlockModel& model, int microbatches,
                           const std::vector<int64_t>& start) {
  const int n = model.num_blocks();
  Schedule s;
  s.microbatches = microbatches;
  s.order.assign(model.num_devices, {});
  std::vector<int> ids(static_cast<size_t>(n) * microbatches);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
    if (start[a] != start[b]) return start[a] < start[b];
    return a % n < b % n;
  });
  for (int id : ids) {
    for (int d : model.blocks[id % n].devices) s.order[d].push_back(Instance{id % n, id / n});
  }
  return s;
}

// ---------------------------------------------------------------------------
// JSON

std::string ScheduleToJson(const BlockModel& model, const Schedule& schedule,
                           const SimResult* sim) {
  const int n = model.num_blocks();
  ir::OrderedJson j;
  j["format"] = "loom.schedule";
  j["version"] = kScheduleJsonVersion;
  if (!schedule.name.empty()) j["name"] = schedule.name;
  j["microbatches"] = schedule.microbatches;
  j["blocks"] = BlockModelJsonValue(model);
  if (schedule.repetend.has_value()) {
    j["repetend"] = {{"period", schedule.repetend->period},
                     {"offset", schedule.repetend->offset}};
  }
  const std::vector<int64_t>* times = nullptr;
  if (!schedule.start.empty()) {
    times = &schedule.start;
  } else if (sim != nullptr && !sim->start.empty()) {
    times = &sim->start;
  }
  ir::OrderedJson order = ir::OrderedJson::array();
  for (const auto& device : schedule.order) {
    ir::OrderedJson row = ir::OrderedJson::array();
    for (const Instance& x : device) {
      ir::OrderedJson e = ir::OrderedJson::array({model.blocks[x.block].name, x.microbatch});
      if (times != nullptr) e.push_back((*times)[x.microbatch * n + x.block]);
      row.push_back(e);
    }
    order.push_back(row);
  }
  j["order"] = order;
  if (sim != nullptr) {
    ir::OrderedJson summary;
    summary["valid"] = sim->valid;
    if (!sim->valid) summary["violation"] = sim->violation;
    summary["makespan"] = sim->makespan;
    summary["bubble_ratio"] = sim->bubble_ratio;
    summary["span"] = sim->span;
    summary["span_bubble_ratio"] = sim->span_bubble_ratio;
    summary["peak_memory"] = sim->peak_memory;
    j["summary"] = summary;
  }
  return ir::DumpJson(j) + "\n";
}

absl::StatusOr<LoadedSchedule> ScheduleFromJson(absl::string_view text,
                                                absl::string_view filename) {
  ir::JsonReader r(filename);
  ir::Json j;
  try {
    j = ir::Json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(filename, ": ", ir::JsonExceptionMessage(e)));
  }
  LOOM_RETURN_IF_ERROR(r.ExpectObject(j, ""));
  LOOM_ASSIGN_OR_RETURN(const ir::Json* format, r.Field(j, "format", ""));
  LOOM_ASSIGN_OR_RETURN(std::string format_name, r.String(*format, "format"));
  if (format_name != "loom.schedule") {
    return r.Error("format", absl::StrCat("expected \"loom.schedule\", got \"", format_name, "\""));
  }
  if (auto it = j.find("version"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(int64_t version, r.Int(*it, "version"));
    if (version != kScheduleJsonVersion) {
      return r.Error("version", absl::StrCat("unsupported version ", version));
    }
  }
  LoadedSchedule out;
  LOOM_ASSIGN_OR_RETURN(const ir::Json* blocks, r.Field(j, "blocks", ""));
  LOOM_ASSIGN_OR_RETURN(out.model, ReadBlockModelJson(r, *blocks, "blocks"));
  Schedule& s = out.schedule;
  if (auto it = j.find("name"); it != j.end()) {
    LOOM_ASSIGN_OR_RETURN(s.name, r.String(*it, "name"));
  }
  LOOM_ASSIGN_OR_RETURN(const ir::Json* mbs, r.Field(j, "microbatches", ""));
  LOOM_ASSIGN_OR_RETURN(s.microbatches, r.Int32(*mbs, "microbatches"));
  if (s.microbatches <= 0 || s.microbatches > (1 << 20)) {
    return r.Error("microbatches", absl::StrCat("must be in [1, 1048576], got ", s.microbatches));
  }
  const int n = out.model.num_blocks();
  if (int64_t{n} * s.microbatches > (int64_t{1} << 28)) {
    return r.Error("microbatches", "too many block instances");
  }
  if (auto it = j.find("repetend"); it != j.end()) {
    Repetend rep;
    LOOM_ASSIGN_OR_RETURN(const ir::Json* period, r.Field(*it, "period", "repetend"));
    LOOM_ASSIGN_OR_RETURN(rep.period, r.Int(*period, "repetend.period"));
    LOOM_ASSIGN_OR_RETURN(const ir::Json* offsets, r.Field(*it, "offset", "repetend"));
    LOOM_RETURN_IF_ERROR(r.ExpectArray(*offsets, "repetend.offset"));
    if (static_cast<int>(offsets->size()) != n) {
      return r.Error("repetend.offset", absl::StrCat("expected ", n, " offsets"));
    }
    for (size_t b = 0; b < offsets->size(); ++b) {
      LOOM_ASSIGN_OR_RETURN(int64_t o, r.Int((*offsets)[b], absl::StrCat("repetend.offset[", b, "]")));
      rep.offset.push_back(o);
    }
    s.repetend = rep;
  }
  LOOM_ASSIGN_OR_RETURN(const ir::Json* order, r.Field(j, "order", ""));
  LOOM_RETURN_IF_ERROR(r.ExpectArray(*order, "order"));
  if (static_cast<int>(order->size()) != out.model.num_devices) {
    return r.Error("order", absl::StrCat(order->size(), " device orders for ",
                                         out.model.num_devices, " devices"));
  }
  std::vector<int64_t> start(static_cast<size_t>(n) * s.microbatches, kUnset);
  int timed = 0, untimed = 0;
  for (size_t d = 0; d < order->size(); ++d) {
    const std::string dpath = absl::StrCat("order[", d, "]");
    LOOM_RETURN_IF_ERROR(r.ExpectArray((*order)[d], dpath));
    std::vector<Instance> row;
    for (size_t i = 0; i < (*order)[d].size(); ++i) {
      const ir::Json& e = (*order)[d][i];
      const std::string epath = absl::StrCat(dpath, "[", i, "]");
      if (!e.is_array() || e.size() < 2 || e.size() > 3 || !e[0].is_string()) {
        return r.Error(epath, "expected [block name, micro-batch] or [block name, micro-batch, start]");
      }
      const int b = out.model.Find(e[0].get<std::string>());
      if (b < 0) return r.Error(epath, absl::StrCat("unknown block '", e[0].get<std::string>(), "'"));
      LOOM_ASSIGN_OR_RETURN(int m, r.Int32(e[1], epath + "[1]"));
      if (m < 0 || m >= s.microbatches) {
        return r.Error(epath, absl::StrCat("micro-batch ", m, " out of range [0, ", s.microbatches, ")"));
      }
      if (e.size() == 3) {
        LOOM_ASSIGN_OR_RETURN(int64_t t, r.Int(e[2], epath + "[2]"));
        if (t < 0 || t > kMaxStartTime) {
          return r.Error(epath + "[2]", absl::StrCat("start ", t, " is outside 0..", kMaxStartTime));
        }
        int64_t& slot = start[static_cast<size_t>(m) * n + b];
        if (slot != kUnset && slot != t) {
          return r.Error(epath, "start differs from the same instance on another device");
        }
        slot = t;
        ++timed;
      } else {
        ++untimed;
      }
      row.push_back(Instance{b, m});
    }
    s.order.push_back(std::move(row));
  }
  if (timed > 0 && untimed > 0) {
    return r.Error("order", "either every entry has a start time or none has");
  }
  if (timed > 0) {
    for (size_t id = 0; id < start.size(); ++id) {
      if (start[id] == kUnset) {
        return r.Error("order", absl::StrCat("no start time for '",
                                             Label(out.model, static_cast<int>(id)), "'"));
      }
    }
    s.start = std::move(start);
  }
  return out;
}

absl::StatusOr<LoadedSchedule> LoadScheduleFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ir::ReadTextFile(path));
  return ScheduleFromJson(text, path);
}

}  // namespace loom::schedule
