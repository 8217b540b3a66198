// CheckScheduleSafety of a factored plan (verify/schedule_safety.h): the scale
// unit's programs run over every micro-batch copy without expanding the plan.
// Steps are (item, copy) pairs read from the order's runs; value copies are
// numbered per factored value (a tagged value has one copy per micro-batch).

#include "verify/factored_schedule_safety_internal.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_kind.h"
#include "ir/status_macros.h"
#include "verify/schedule_memory.h"

namespace loom::verify {
namespace {

using ir::Collective;
using ir::OrderRun;
using ir::Plan;
using ir::PlanStep;
using ir::Task;
using ir::ValueId;
using Kind = SafetyIssue::Kind;

using internal::kInt64Max;
using internal::SaturatingAdd;
using internal::ValueBytes;

// A value copy a step reads or writes: the factored value and the copy's number.
struct Ref {
  ValueId value;
  int64_t copy;
};

// A position in a device's program: run index and step index within its segment.
struct Cursor {
  size_t run = 0;
  size_t step = 0;
};

class FactoredChecker {
 public:
  FactoredChecker(const ir::Graph& spec, const Plan& plan, const SafetyOptions& options)
      : spec_(spec),
        plan_(plan),
        order_(plan.factored_order),
        options_(options),
        copies_(plan.factoring->microbatches),
        unit_(static_cast<int64_t>(plan.factored_order.programs.size())) {}

  absl::StatusOr<SafetyReport> Run();

 private:
  bool Tagged(const PlanStep& s) const {
    return (s.is_collective ? plan_.collectives[s.id].microbatch
                            : plan_.tasks[s.id].info.microbatch) == 0;
  }
  int64_t ValueCopy(ValueId v, int m) const {
    return value_first_[v] + (plan_.values[v].microbatch == 0 ? std::max(m, 0) : 0);
  }
  int64_t CollectiveCopy(int c, int m) const {
    return collective_first_[c] + (plan_.collectives[c].microbatch == 0 ? std::max(m, 0) : 0);
  }
  // Step `s` (with its copy) as issues name it.
  std::string Describe(const PlanStep& s) const;
  // The value copies step `s` reads on device d (its local inputs).
  void LocalInputs(const PlanStep& s, int64_t d, std::vector<Ref>& out) const;
  // The value copies step `s` writes on device d.
  void LocalOutputs(const PlanStep& s, int64_t d, std::vector<Ref>& out) const;
  // Numbers device d's value copies densely (local_[copy of v] = local_first_[v] +
  // copy - value_first_[v]); returns their count.
  int64_t NumberLocalCopies(int64_t d);
  int64_t Local(const Ref& r) const { return local_first_[r.value] + r.copy - value_first_[r.value]; }
  const PlanStep& At(int64_t d, const Cursor& c) const {
    return order_.segments[order_.programs[d][c.run].segment][c.step];
  }
  PlanStep StepAt(int64_t d, const Cursor& c) const {
    PlanStep s = At(d, c);
    s.microbatch = order_.programs[d][c.run].microbatch;
    return s;
  }
  bool AtEnd(int64_t d, const Cursor& c) const { return c.run >= order_.programs[d].size(); }
  void Next(int64_t d, Cursor& c) const;
  // Calls fn(step, position) for each step of device d's program.
  template <typename Fn>
  void ForEachStep(int64_t d, Fn fn) const;

  absl::Status Validate();
  void CheckMembership();
  void CheckDependencies();
  void Simulate();
  void CheckMemory();
  int RoleBucket(ValueId v) const;

  const ir::Graph& spec_;
  const Plan& plan_;
  const ir::FactoredOrder& order_;
  const SafetyOptions options_;
  const int copies_;
  const int64_t unit_;
  std::vector<int64_t> value_first_;       // per value (+1): its first copy
  std::vector<int64_t> collective_first_;  // per collective (+1): its first copy
  std::vector<int> producer_kind_;         // per value: 0 none, 1 task, 2 collective
  std::vector<int32_t> producer_id_;
  std::vector<std::vector<ValueId>> on_device_;  // per unit device: its values
  std::vector<int64_t> local_first_;             // per value: its first local copy
  bool clean_ = true;  // no membership or dependency issue
  std::vector<SafetyIssue> issues_;
  SafetyReport report_;
};

std::string FactoredChecker::Describe(const PlanStep& s) const {
  const std::string mb =
      s.microbatch >= 0 ? absl::StrCat(" (micro-batch ", s.microbatch, ")") : std::string();
  if (!s.is_collective) {
    return absl::StrCat("task #", s.id, " '", ir::OpKindName(plan_.tasks[s.id].kind), "'", mb);
  }
  return absl::StrCat(ir::CollectiveKindName(plan_.collectives[s.id].kind), " #", s.id, mb);
}

void FactoredChecker::LocalInputs(const PlanStep& s, int64_t d, std::vector<Ref>& out) const {
  out.clear();
  if (!s.is_collective) {
    const Task& t = plan_.tasks[s.id];
    for (ValueId v : t.inputs) {
      if (t.info.microbatch < 0 && plan_.values[v].microbatch == 0) {
        // An untagged task reads every micro-batch's copy.
        for (int m = 0; m < copies_; ++m) out.push_back({v, ValueCopy(v, m)});
      } else {
        out.push_back({v, ValueCopy(v, s.microbatch)});
      }
    }
    return;
  }
  const Collective& c = plan_.collectives[s.id];
  int rank = -1;
  for (size_t i = 0; i < c.devices.size(); ++i) {
    if (c.devices[i] == d) rank = static_cast<int>(i);
  }
  if (rank < 0) return;
  if (c.inputs.size() == c.devices.size()) {
    out.push_back({c.inputs[rank], ValueCopy(c.inputs[rank], s.microbatch)});
  } else if (rank == 0) {
    for (ValueId v : c.inputs) out.push_back({v, ValueCopy(v, s.microbatch)});
  }
}

void FactoredChecker::LocalOutputs(const PlanStep& s, int64_t d, std::vector<Ref>& out) const {
  out.clear();
  const std::vector<ValueId>& outputs =
      s.is_collective ? plan_.collectives[s.id].outputs : plan_.tasks[s.id].outputs;
  for (ValueId v : outputs) {
    if (plan_.values[v].device == d) out.push_back({v, ValueCopy(v, s.microbatch)});
  }
}

int64_t FactoredChecker::NumberLocalCopies(int64_t d) {
  int64_t n = 0;
  for (ValueId v : on_device_[d]) {
    local_first_[v] = n;
    n += value_first_[v + 1] - value_first_[v];
  }
  return n;
}

void FactoredChecker::Next(int64_t d, Cursor& c) const {
  const std::vector<OrderRun>& runs = order_.programs[d];
  ++c.step;
  while (c.run < runs.size() && c.step >= order_.segments[runs[c.run].segment].size()) {
    ++c.run;
    c.step = 0;
  }
}

template <typename Fn>
void FactoredChecker::ForEachStep(int64_t d, Fn fn) const {
  int64_t position = 0;
  for (const OrderRun& run : order_.programs[d]) {
    for (PlanStep s : order_.segments[run.segment]) {
      s.microbatch = run.microbatch;
      fn(s, position++);
    }
  }
}

// Ids, segments, copies, devices: what the checks below index by.
absl::Status FactoredChecker::Validate() {
  if (options_.memory_capacity_bytes.has_value() && *options_.memory_capacity_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule safety: memory capacity ", *options_.memory_capacity_bytes, " is negative"));
  }
  const ir::Factoring& f = *plan_.factoring;
  const int64_t want = f.dp > 1 ? f.dp_device_stride : plan_.mesh.num_devices();
  if (unit_ != want) {
    return absl::InvalidArgumentError(absl::StrCat("schedule safety: the order has ", unit_,
                                                   " programs, the scale unit ", want,
                                                   " devices"));
  }
  const int64_t num_values = static_cast<int64_t>(plan_.values.size());
  value_first_.assign(num_values + 1, 0);
  for (int64_t v = 0; v < num_values; ++v) {
    const ir::PlanValue& value = plan_.values[v];
    if (value.device < 0 || value.device >= unit_) {
      return absl::InvalidArgumentError(absl::StrCat("schedule safety: value ", v, ": device ",
                                                     value.device, " outside the scale unit"));
    }
    value_first_[v + 1] = value_first_[v] + (value.microbatch == 0 ? copies_ : 1);
  }
  collective_first_.assign(plan_.collectives.size() + 1, 0);
  for (size_t c = 0; c < plan_.collectives.size(); ++c) {
    const Collective& col = plan_.collectives[c];
    collective_first_[c + 1] = collective_first_[c] + (col.microbatch == 0 ? copies_ : 1);
    for (int64_t d : col.devices) {
      if (d < 0 || d >= unit_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule safety: collective ", c, ": device ", d, " outside the scale unit"));
      }
    }
  }
  on_device_.assign(unit_, {});
  for (ValueId v = 0; v < num_values; ++v) on_device_[plan_.values[v].device].push_back(v);
  local_first_.assign(num_values, 0);
  producer_kind_.assign(num_values, 0);
  producer_id_.assign(num_values, -1);
  auto produced = [&](const std::vector<ValueId>& outputs, int kind, int32_t id) -> absl::Status {
    for (ValueId v : outputs) {
      if (v < 0 || v >= num_values) {
        return absl::InvalidArgumentError(absl::StrCat("schedule safety: unknown value ", v));
      }
      if (producer_kind_[v] != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("schedule safety: value ", v, " is written twice"));
      }
      producer_kind_[v] = kind;
      producer_id_[v] = id;
    }
    return absl::OkStatus();
  };
  for (const Task& t : plan_.tasks) {
    if (t.device < 0 || t.device >= unit_) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule safety: task ", t.id, ": device ", t.device, " outside the unit"));
    }
    for (ValueId v : t.inputs) {
      if (v < 0 || v >= num_values) {
        return absl::InvalidArgumentError(absl::StrCat("schedule safety: unknown value ", v));
      }
    }
    LOOM_RETURN_IF_ERROR(produced(t.outputs, 1, t.id));
  }
  for (const Collective& c : plan_.collectives) {
    for (ValueId v : c.inputs) {
      if (v < 0 || v >= num_values) {
        return absl::InvalidArgumentError(absl::StrCat("schedule safety: unknown value ", v));
      }
    }
    LOOM_RETURN_IF_ERROR(produced(c.outputs, 2, c.id));
  }
  for (size_t k = 0; k < order_.segments.size(); ++k) {
    for (const PlanStep& s : order_.segments[k]) {
      const int64_t limit = s.is_collective ? static_cast<int64_t>(plan_.collectives.size())
                                            : static_cast<int64_t>(plan_.tasks.size());
      if (s.id < 0 || s.id >= limit) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule safety: order segment ", k, ": unknown ",
            s.is_collective ? "collective " : "task ", s.id));
      }
    }
  }
  for (int64_t d = 0; d < unit_; ++d) {
    const std::vector<OrderRun>& runs = order_.programs[d];
    for (size_t k = 0; k < runs.size(); ++k) {
      if (runs[k].segment < 0 || runs[k].segment >= static_cast<int32_t>(order_.segments.size())) {
        return absl::InvalidArgumentError(absl::StrCat("schedule safety: order[", d, "][", k,
                                                       "]: unknown segment ", runs[k].segment));
      }
      if (runs[k].microbatch < -1 || runs[k].microbatch >= copies_) {
        return absl::InvalidArgumentError(absl::StrCat("schedule safety: order[", d, "][", k,
                                                       "]: micro-batch ", runs[k].microbatch,
                                                       " outside -1..", copies_ - 1));
      }
      for (const PlanStep& s : order_.segments[runs[k].segment]) {
        if (Tagged(s) != (runs[k].microbatch >= 0)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "schedule safety: order[", d, "][", k, "]: ", Describe(s),
              runs[k].microbatch >= 0 ? " is untagged but runs as micro-batch "
                                      : " is tagged but runs without a micro-batch",
              runs[k].microbatch >= 0 ? absl::StrCat(runs[k].microbatch) : std::string()));
        }
      }
    }
  }
  return absl::OkStatus();
}

// 1. Every copy once where it belongs.
void FactoredChecker::CheckMembership() {
  std::vector<int64_t> task_first(plan_.tasks.size() + 1, 0);
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    task_first[t + 1] = task_first[t] + (plan_.tasks[t].info.microbatch == 0 ? copies_ : 1);
  }
  std::vector<uint8_t> task_count(task_first.back(), 0);
  std::vector<int32_t> listed(collective_first_.back(), 0);
  std::vector<uint8_t> send_side(collective_first_.back(), 0);  // send_recv: 1 src, 2 dst
  for (int64_t d = 0; d < unit_; ++d) {
    ForEachStep(d, [&](const PlanStep& s, int64_t position) {
      if (!s.is_collective) {
        const Task& t = plan_.tasks[s.id];
        if (t.device != d) {
          clean_ = false;
          issues_.push_back({Kind::kWrongDevice, {d},
                             absl::StrCat("device ", d, " lists ", Describe(s), " at step ",
                                          position, ", which runs on device ", t.device)});
          return;
        }
        uint8_t& n = task_count[task_first[s.id] + std::max(s.microbatch, 0)];
        if (n < 2) ++n;
        return;
      }
      const Collective& c = plan_.collectives[s.id];
      const auto it = std::find(c.devices.begin(), c.devices.end(), d);
      if (it == c.devices.end()) {
        clean_ = false;
        issues_.push_back({Kind::kWrongDevice, {d},
                           absl::StrCat("device ", d, " lists ", Describe(s), " at step ",
                                        position, ", whose group is devices ",
                                        absl::StrJoin(c.devices, ","))});
        return;
      }
      const int64_t k = CollectiveCopy(s.id, s.microbatch);
      ++listed[k];
      if (c.kind == ir::CollectiveKind::kSendRecv) {
        send_side[k] |= it == c.devices.begin() ? 1 : 2;
      }
    });
  }
  for (size_t t = 0; t < plan_.tasks.size(); ++t) {
    for (int64_t k = task_first[t]; k < task_first[t + 1]; ++k) {
      if (task_count[k] == 1) continue;
      clean_ = false;
      PlanStep s{false, static_cast<int32_t>(t),
                 plan_.tasks[t].info.microbatch == 0 ? static_cast<int32_t>(k - task_first[t]) : -1};
      issues_.push_back({task_count[k] == 0 ? Kind::kMissingStep : Kind::kDuplicateStep,
                         {plan_.tasks[t].device},
                         absl::StrCat(Describe(s), task_count[k] == 0 ? " is missing from"
                                                                      : " is listed twice by",
                                      " device ", plan_.tasks[t].device, "'s program")});
    }
  }
  for (size_t c = 0; c < plan_.collectives.size(); ++c) {
    const Collective& col = plan_.collectives[c];
    const int64_t n = static_cast<int64_t>(col.devices.size());
    for (int64_t k = collective_first_[c]; k < collective_first_[c + 1]; ++k) {
      if (listed[k] == n && (col.kind != ir::CollectiveKind::kSendRecv || send_side[k] == 3)) {
        continue;
      }
      clean_ = false;
      PlanStep s{true, static_cast<int32_t>(c),
                 col.microbatch == 0 ? static_cast<int32_t>(k - collective_first_[c]) : -1};
      if (col.kind == ir::CollectiveKind::kSendRecv && send_side[k] == 1) {
        issues_.push_back({Kind::kUnmatchedSend, {col.devices[0], col.devices[1]},
                           absl::StrCat(Describe(s), ": device ", col.devices[0],
                                        " sends, device ", col.devices[1], " never receives")});
        continue;
      }
      issues_.push_back({listed[k] < n ? Kind::kMissingStep : Kind::kDuplicateStep, col.devices,
                         absl::StrCat(Describe(s), " is listed ", listed[k], " times by its ", n,
                                      " devices (devices ", absl::StrJoin(col.devices, ","),
                                      ")")});
    }
  }
}

// 2. On each device, a step after the steps there producing its inputs.
void FactoredChecker::CheckDependencies() {
  std::vector<Ref> reads, writes;
  for (int64_t d = 0; d < unit_; ++d) {
    std::vector<char> produced(NumberLocalCopies(d), 0);
    int reported = 0;
    ForEachStep(d, [&](const PlanStep& s, int64_t position) {
      LocalInputs(s, d, reads);
      for (const Ref& r : reads) {
        const ValueId v = r.value;
        if (producer_kind_[v] == 0 || plan_.values[v].device != d || produced[Local(r)]) continue;
        clean_ = false;
        if (reported++ < kMaxIssuesPerDevice) {
          const PlanStep producer{producer_kind_[v] == 2, producer_id_[v],
                                  plan_.values[v].microbatch == 0
                                      ? static_cast<int32_t>(r.copy - value_first_[v])
                                      : -1};
          issues_.push_back({Kind::kDependency, {d},
                             absl::StrCat("device ", d, ": ", Describe(s), " at step ", position,
                                          " reads value ", v, " before ", Describe(producer),
                                          " writes it")});
        }
        break;
      }
      LocalOutputs(s, d, writes);
      for (const Ref& r : writes) produced[Local(r)] = 1;
    });
  }
}

// 3 and 4. A run where tasks proceed (their inputs are there, by 2) and a
// collective copy completes once every member has reached it; programs that do
// not all finish deadlock. A finished run implies that every pair of members
// issued their shared collectives in one relative order.
void FactoredChecker::Simulate() {
  std::vector<Cursor> cursor(unit_);
  std::vector<int32_t> arrived(collective_first_.back(), 0);
  std::vector<int64_t> work;
  for (int64_t d = 0; d < unit_; ++d) {
    // Past empty runs at the start.
    const std::vector<OrderRun>& runs = order_.programs[d];
    while (cursor[d].run < runs.size() && order_.segments[runs[cursor[d].run].segment].empty()) {
      ++cursor[d].run;
    }
    work.push_back(d);
  }
  while (!work.empty()) {
    const int64_t d = work.back();
    work.pop_back();
    while (!AtEnd(d, cursor[d])) {
      const PlanStep s = StepAt(d, cursor[d]);
      if (!s.is_collective) {
        Next(d, cursor[d]);
        continue;
      }
      const Collective& c = plan_.collectives[s.id];
      const int64_t k = CollectiveCopy(s.id, s.microbatch);
      if (++arrived[k] < static_cast<int32_t>(c.devices.size())) break;  // waits
      for (int64_t e : c.devices) {
        Next(e, cursor[e]);
        if (e != d) work.push_back(e);
      }
    }
  }
  // Devices left waiting: follow who each waits for until a device repeats.
  std::vector<int64_t> waits_for(unit_, -1);
  for (int64_t d = 0; d < unit_; ++d) {
    if (AtEnd(d, cursor[d])) continue;
    const PlanStep s = StepAt(d, cursor[d]);
    for (int64_t e : plan_.collectives[s.id].devices) {
      if (e == d) continue;
      if (AtEnd(e, cursor[e]) || !(StepAt(e, cursor[e]) == s)) {
        waits_for[d] = e;
        break;
      }
    }
  }
  std::vector<char> seen(unit_, 0);
  for (int64_t start = 0; start < unit_; ++start) {
    if (waits_for[start] < 0 || seen[start]) continue;
    std::vector<int64_t> chain;
    int64_t d = start;
    while (d >= 0 && !seen[d] && !AtEnd(d, cursor[d])) {
      seen[d] = 1;
      chain.push_back(d);
      d = waits_for[d];
    }
    const auto cycle_start = d < 0 ? chain.end() : std::find(chain.begin(), chain.end(), d);
    if (cycle_start == chain.end()) continue;
    std::vector<int64_t> devices(cycle_start, chain.end());
    std::vector<std::string> lines;
    for (int64_t x : devices) {
      lines.push_back(absl::StrCat("device ", x, " waits at ", Describe(StepAt(x, cursor[x])),
                                   " for device ", waits_for[x]));
    }
    issues_.push_back({Kind::kDeadlock, devices, absl::StrJoin(lines, "; ")});
    if (issues_.size() > 64) break;
  }
  bool stuck = false;
  for (int64_t d = 0; d < unit_; ++d) stuck |= !AtEnd(d, cursor[d]);
  if (stuck && std::none_of(issues_.begin(), issues_.end(), [](const SafetyIssue& i) {
        return i.kind == Kind::kDeadlock;
      })) {
    std::vector<std::string> lines;
    for (int64_t d = 0; d < unit_ && lines.size() < 4; ++d) {
      if (AtEnd(d, cursor[d])) continue;
      lines.push_back(
          absl::StrCat("device ", d, " waits at ", Describe(StepAt(d, cursor[d]))));
    }
    issues_.push_back({Kind::kDeadlock, {}, absl::StrJoin(lines, "; ")});
  }
}

int FactoredChecker::RoleBucket(ValueId v) const {
  return internal::MemoryRoleBucket(&spec_, plan_.values[v], producer_kind_[v] == 2);
}

// 5. Live bytes per device, with the running gradient-accumulation sum.
void FactoredChecker::CheckMemory() {
  const int64_t num_values = static_cast<int64_t>(plan_.values.size());
  std::vector<char> is_output(num_values, 0);
  for (ValueId v : plan_.outputs) {
    if (v >= 0 && v < num_values) is_output[v] = 1;
  }
  std::vector<int> bucket(num_values);
  std::vector<int64_t> bytes(num_values);
  for (ValueId v = 0; v < num_values; ++v) {
    bucket[v] = RoleBucket(v);
    bytes[v] = ValueBytes(plan_.values[v]);
  }
  // Accumulations folded as their copies arrive: per value, the task summing it.
  std::vector<int32_t> folded_into(num_values, -1);
  for (const Task& t : plan_.tasks) {
    for (ValueId v : t.inputs) {
      if (internal::FoldsIntoRunningSum(t, plan_.values[v], producer_kind_[v] != 0)) {
        folded_into[v] = t.id;
      }
    }
  }
  report_.peak_bytes.assign(unit_, 0);
  report_.peak_by_role.assign(unit_, {});
  std::vector<Ref> reads, writes;
  for (int64_t d = 0; d < unit_; ++d) {
    const int64_t local = NumberLocalCopies(d);
    std::vector<int64_t> last_use(local, -1);
    std::vector<char> state(local, 0);  // 0 absent, 1 live, 2 freed
    ForEachStep(d, [&](const PlanStep& s, int64_t position) {
      LocalInputs(s, d, reads);
      for (const Ref& r : reads) {
        if (plan_.values[r.value].device != d) continue;
        if (!s.is_collective && folded_into[r.value] == s.id) continue;  // folded as it came
        last_use[Local(r)] = position;
      }
    });
    int64_t live = 0, peak = 0;
    int64_t role_live[5] = {0, 0, 0, 0, 0};
    MemoryByRole peak_roles;
    PlanStep peak_step{};
    bool peak_at_start = true;
    // Sums saturate: a peak past int64 stays the largest value, never wraps.
    auto add = [&](ValueId v, int64_t n) {
      live = n >= 0 ? SaturatingAdd(live, n) : (live == kInt64Max ? live : live + n);
      int64_t& r = role_live[bucket[v]];
      r = n >= 0 ? SaturatingAdd(r, n) : (r == kInt64Max ? r : r + n);
    };
    for (ValueId v : on_device_[d]) {
      if (producer_kind_[v] != 0) continue;
      for (int64_t k = local_first_[v]; k < local_first_[v] + value_first_[v + 1] - value_first_[v];
           ++k) {
        state[k] = 1;
        add(v, bytes[v]);
      }
    }
    auto snapshot = [&] {
      peak_roles = MemoryByRole{role_live[0], role_live[1], role_live[2], role_live[3],
                                role_live[4]};
    };
    peak = live;
    snapshot();
    for (ValueId v : on_device_[d]) {
      if (producer_kind_[v] != 0 || is_output[v]) continue;
      for (int64_t k = local_first_[v]; k < local_first_[v] + value_first_[v + 1] - value_first_[v];
           ++k) {
        if (last_use[k] < 0) {
          state[k] = 2;
          add(v, -bytes[v]);
        }
      }
    }
    auto release = [&](const Ref& r) {
      const int64_t k = Local(r);
      if (is_output[r.value] || state[k] != 1) return;
      state[k] = 2;
      add(r.value, -bytes[r.value]);
    };
    ForEachStep(d, [&](const PlanStep& s, int64_t position) {
      LocalOutputs(s, d, writes);
      for (const Ref& r : writes) {
        if (state[Local(r)] != 0) continue;
        const ValueId v = r.value;
        state[Local(r)] = 1;
        add(v, bytes[v]);
        if (folded_into[v] >= 0) {
          for (ValueId sum : plan_.tasks[folded_into[v]].outputs) {
            const Ref whole{sum, value_first_[sum]};
            if (plan_.values[sum].device == d && state[Local(whole)] == 0) {
              state[Local(whole)] = 1;
              add(sum, bytes[sum]);
            }
          }
        }
      }
      if (live > peak) {
        peak = live;
        snapshot();
        peak_step = s;
        peak_at_start = false;
      }
      LocalInputs(s, d, reads);
      for (const Ref& r : reads) {
        if (plan_.values[r.value].device == d && last_use[Local(r)] == position) release(r);
      }
      for (const Ref& r : writes) {
        if (last_use[Local(r)] <= position) release(r);
      }
    });
    report_.peak_bytes[d] = peak;
    report_.peak_by_role[d] = peak_roles;
    if (options_.memory_capacity_bytes.has_value() && peak > *options_.memory_capacity_bytes) {
      issues_.push_back(
          {Kind::kMemory, {d},
           absl::StrCat("device ", d, " holds ", peak, " bytes of live values ",
                        peak_at_start ? std::string("at the start")
                                      : absl::StrCat("at ", Describe(peak_step)),
                        ", above the capacity of ", *options_.memory_capacity_bytes,
                        " bytes")});
    }
  }
}

absl::StatusOr<SafetyReport> FactoredChecker::Run() {
  report_.checked = true;
  LOOM_RETURN_IF_ERROR(Validate());
  CheckMembership();
  CheckDependencies();
  if (clean_) Simulate();
  CheckMemory();
  std::stable_sort(issues_.begin(), issues_.end(),
                   [](const SafetyIssue& a, const SafetyIssue& b) { return a.kind < b.kind; });
  report_.issues = std::move(issues_);
  const ir::Factoring& f = *plan_.factoring;
  report_.replicas = f.dp;
  if (f.dp > 1) {
    // Every replica runs its unit device's program: the same peak.
    std::vector<int64_t> peaks(plan_.mesh.num_devices(), 0);
    std::vector<MemoryByRole> roles(peaks.size());
    for (int64_t r = 0; r < f.dp; ++r) {
      for (int64_t d = 0; d < unit_; ++d) {
        peaks[d + r * unit_] = report_.peak_bytes[d];
        roles[d + r * unit_] = report_.peak_by_role[d];
      }
    }
    report_.peak_bytes = std::move(peaks);
    report_.peak_by_role = std::move(roles);
  }
  return std::move(report_);
}

}  // namespace

absl::StatusOr<SafetyReport> CheckFactoredScheduleSafety(const ir::Graph& spec,
                                                         const ir::Plan& plan,
                                                         const SafetyOptions& options) {
  if (!plan.is_factored() || plan.factored_order.empty()) return SafetyReport{};
  FactoredChecker checker(spec, plan, options);
  return checker.Run();
}

}  // namespace loom::verify
