// CheckScheduleSafety of verify/schedule_safety.h.

#include "verify/schedule_safety.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "ir/op_kind.h"
#include "ir/shape.h"
#include "ir/status_macros.h"
#include "verify/factored_schedule_safety_internal.h"
#include "verify/schedule_memory.h"

namespace loom::verify {
namespace {

using ir::Collective;
using ir::CollectiveKind;
using ir::Plan;
using ir::PlanStep;
using ir::Task;
using ir::ValueId;
using Kind = SafetyIssue::Kind;

template <typename... Args>
absl::Status Error(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("schedule safety: ", args...));
}

using internal::kInt64Max;
using internal::SaturatingAdd;
using internal::SaturatingMul;
using internal::ValueBytes;

// Collects issues, detailing at most kMaxIssuesPerDevice per kind and first device.
class IssueSink {
 public:
  void Add(Kind kind, std::vector<int64_t> devices, std::string message) {
    const int64_t first = devices.empty() ? -1 : devices[0];
    if (++count_[{static_cast<int>(kind), first}] > kMaxIssuesPerDevice) return;
    issues_.push_back({kind, std::move(devices), std::move(message)});
    has_[static_cast<int>(kind)] = true;
  }
  bool Has(Kind kind) const { return has_[static_cast<int>(kind)]; }
  std::vector<SafetyIssue> Finish() {
    for (const auto& [key, n] : count_) {
      if (n <= kMaxIssuesPerDevice) continue;
      const Kind kind = static_cast<Kind>(key.first);
      issues_.push_back({kind,
                         key.second < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{key.second},
                         absl::StrCat("device ", key.second, ": ", n - kMaxIssuesPerDevice,
                                      " more ", SafetyIssueKindName(kind), " issues")});
    }
    std::stable_sort(issues_.begin(), issues_.end(),
                     [](const SafetyIssue& a, const SafetyIssue& b) { return a.kind < b.kind; });
    return std::move(issues_);
  }

 private:
  std::vector<SafetyIssue> issues_;
  std::map<std::pair<int, int64_t>, int64_t> count_;
  bool has_[8] = {};
};

// One entry of a device's program, decoded.
struct Entry {
  int step = -1;       // task id, or num_tasks + collective id
  int rank = -1;       // collectives: the device's rank in the group
  bool valid = false;  // the device runs this step (its task, or a collective it is in)
  bool first = false;  // first valid occurrence of the step on this device
};

// State of the simulated run.
struct Simulation {
  Simulation(int64_t num_values, int num_steps, int64_t num_slots, int64_t num_devices)
      : produced(num_values, 0),
        wait_head(num_values, -1),
        done(num_steps, 0),
        arrived(num_slots, 0),
        pc(num_devices, 0),
        cursor(num_devices, 0),
        wait_value(num_devices, -1),
        next_waiter(num_devices, -1) {}

  std::vector<char> produced;
  std::vector<int64_t> wait_head;   // per value: first device waiting for it
  std::vector<char> done;           // per step
  std::vector<int> arrived_count;   // per collective
  std::vector<char> arrived;        // per collective slot
  std::vector<size_t> pc;           // per device: next entry of its program
  std::vector<size_t> cursor;       // per device: next input of that entry to check
  std::vector<ValueId> wait_value;  // per device: value it waits for, or -1
  std::vector<int64_t> next_waiter;
  std::vector<int64_t> work;
};

class Checker {
 public:
  // `spec` (may be null) gives the roles of values.
  Checker(const Plan& plan, const SafetyOptions& options, const ir::Graph* spec = nullptr)
      : plan_(plan),
        options_(options),
        spec_(spec),
        num_devices_(plan.mesh.num_devices()),
        num_tasks_(static_cast<int>(plan.tasks.size())),
        num_steps_(num_tasks_ + static_cast<int>(plan.collectives.size())) {}

  absl::StatusOr<SafetyReport> Run();

 private:
  absl::Status Validate();
  absl::Status DecodePrograms();
  void CheckMembership();
  void CheckDependencies();
  void CheckCollectiveOrder();
  void Simulate();
  // Reports the cycles of waits of a run that could not finish.
  void ReportStuck(const Simulation& sim);
  void CheckMemory();

  bool is_collective(int s) const { return s >= num_tasks_; }
  const Task& task(int s) const { return plan_.tasks[s]; }
  const Collective& collective(int s) const { return plan_.collectives[s - num_tasks_]; }
  int64_t slot(int s, int rank) const { return slot_begin_[s - num_tasks_] + rank; }
  int group_size(int s) const { return static_cast<int>(collective(s).devices.size()); }
  // The rank of device `d` in collective step `s`, or -1.
  int MemberRank(int s, int64_t d) const;
  // What step `s` reads at `rank` (any rank for a task).
  absl::Span<const ValueId> LocalInputs(int s, int rank) const;
  absl::Span<const ValueId> Outputs(int s) const {
    return is_collective(s) ? absl::MakeConstSpan(collective(s).outputs)
                            : absl::MakeConstSpan(task(s).outputs);
  }
  absl::Span<const ValueId> AllInputs(int s) const {
    return is_collective(s) ? absl::MakeConstSpan(collective(s).inputs)
                            : absl::MakeConstSpan(task(s).inputs);
  }
  // The position of step `s` on device `d` (its first valid occurrence), or -1.
  int64_t Position(int s, int64_t d) const;
  // "task #5 'matmul' (micro-batch 0)", "all_reduce #3 (micro-batch 1)", "send_recv #7".
  std::string Describe(int s) const;

  // The role bucket of value `v` (MemoryByRole field order): 0 weights,
  // 1 gradients, 2 optimizer states, 3 activations, 4 communication.
  int RoleBucket(ValueId v) const;

  const Plan& plan_;
  const SafetyOptions options_;
  const ir::Graph* spec_;
  const int64_t num_devices_;
  const int num_tasks_;
  const int num_steps_;
  std::vector<int> producer_;        // per value: step, or -1
  std::vector<int64_t> slot_begin_;  // per collective (+1): its first rank slot
  // Per slot, within each collective sorted by device: (device, rank).
  std::vector<std::pair<int64_t, int>> members_;
  std::vector<std::vector<Entry>> programs_;    // per mesh device
  std::vector<int64_t> task_pos_, task_count_;  // per task, on its own device
  std::vector<int64_t> slot_pos_, slot_count_;  // per collective slot
  bool membership_issues_ = false;
  IssueSink sink_;
  SafetyReport report_;
};

int Checker::MemberRank(int s, int64_t d) const {
  const int64_t begin = slot_begin_[s - num_tasks_];
  const int64_t end = slot_begin_[s - num_tasks_ + 1];
  auto it = std::lower_bound(members_.begin() + begin, members_.begin() + end,
                             std::pair<int64_t, int>{d, -1});
  if (it == members_.begin() + end || it->first != d) return -1;
  return it->second;
}

absl::Span<const ValueId> Checker::LocalInputs(int s, int rank) const {
  if (!is_collective(s)) return task(s).inputs;
  const Collective& c = collective(s);
  if (c.inputs.size() == c.devices.size()) return absl::MakeConstSpan(&c.inputs[rank], 1);
  return rank == 0 ? absl::MakeConstSpan(c.inputs) : absl::Span<const ValueId>();
}

int64_t Checker::Position(int s, int64_t d) const {
  if (!is_collective(s)) return task(s).device == d ? task_pos_[s] : -1;
  const int rank = MemberRank(s, d);
  return rank < 0 ? -1 : slot_pos_[slot(s, rank)];
}

std::string Checker::Describe(int s) const {
  std::string mb;
  if (!is_collective(s)) {
    const Task& t = task(s);
    if (t.info.microbatch >= 0) mb = absl::StrCat(" (micro-batch ", t.info.microbatch, ")");
    return absl::StrCat("task #", s, " '", ir::OpKindName(t.kind), "'", mb);
  }
  const Collective& c = collective(s);
  if (c.microbatch >= 0) mb = absl::StrCat(" (micro-batch ", c.microbatch, ")");
  return absl::StrCat(ir::CollectiveKindName(c.kind), " #", s - num_tasks_, mb);
}

int Checker::RoleBucket(ValueId v) const {
  return internal::MemoryRoleBucket(spec_, plan_.values[v],
                                    producer_[v] >= 0 && is_collective(producer_[v]));
}

// ---------------------------------------------------------------------------
// Structure: ids in range, one producer per value, collective groups.

absl::Status Checker::Validate() {
  if (options_.memory_capacity_bytes.has_value() && *options_.memory_capacity_bytes < 0) {
    return Error("memory capacity ", *options_.memory_capacity_bytes, " is negative");
  }
  const int64_t num_values = static_cast<int64_t>(plan_.values.size());
  for (int64_t v = 0; v < num_values; ++v) {
    const int64_t d = plan_.values[v].device;
    if (d < 0 || d >= num_devices_) {
      return Error("value ", v, ": device ", d, " outside the mesh of ", num_devices_, " devices");
    }
  }
  producer_.assign(num_values, -1);
  slot_begin_.assign(plan_.collectives.size() + 1, 0);
  for (int s = 0; s < num_steps_; ++s) {
    if (is_collective(s)) {
      const Collective& c = collective(s);
      const size_t n = c.devices.size();
      if (n == 0) return Error(Describe(s), ": empty device group");
      if (c.kind == CollectiveKind::kSendRecv && n != 2) {
        return Error(Describe(s), ": ", n, " devices, a send_recv has 2 (source, destination)");
      }
      if (c.inputs.size() != n && c.inputs.size() > 1) {
        return Error(Describe(s), ": ", c.inputs.size(), " inputs for a group of ", n,
                     " devices (one per device, or one on the first)");
      }
      for (int64_t d : c.devices) {
        if (d < 0 || d >= num_devices_) {
          return Error(Describe(s), ": device ", d, " outside the mesh of ", num_devices_,
                       " devices");
        }
      }
      slot_begin_[s - num_tasks_ + 1] = slot_begin_[s - num_tasks_] + static_cast<int64_t>(n);
    } else if (task(s).device < 0 || task(s).device >= num_devices_) {
      return Error(Describe(s), ": device ", task(s).device, " outside the mesh of ", num_devices_,
                   " devices");
    }
    for (ValueId v : AllInputs(s)) {
      if (v < 0 || v >= num_values) return Error(Describe(s), ": unknown input value ", v);
    }
    for (ValueId v : Outputs(s)) {
      if (v < 0 || v >= num_values) return Error(Describe(s), ": unknown output value ", v);
      if (producer_[v] >= 0) {
        return Error(Describe(s), ": value ", v, " is also written by ", Describe(producer_[v]));
      }
      producer_[v] = s;
    }
  }
  members_.resize(slot_begin_.back());
  for (int s = num_tasks_; s < num_steps_; ++s) {
    const Collective& c = collective(s);
    const int64_t begin = slot_begin_[s - num_tasks_];
    for (size_t r = 0; r < c.devices.size(); ++r)
      members_[begin + r] = {c.devices[r], static_cast<int>(r)};
    auto first = members_.begin() + begin;
    auto last = first + static_cast<int64_t>(c.devices.size());
    std::sort(first, last);
    for (auto it = first; it + 1 < last; ++it) {
      if (it->first == (it + 1)->first) {
        return Error(Describe(s), ": device ", it->first, " appears twice in the group");
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Programs: decode each device's order, count and place every step.

absl::Status Checker::DecodePrograms() {
  const int64_t listed = static_cast<int64_t>(plan_.order.size());
  programs_.assign(num_devices_, {});
  task_pos_.assign(num_tasks_, -1);
  task_count_.assign(num_tasks_, 0);
  slot_pos_.assign(slot_begin_.back(), -1);
  slot_count_.assign(slot_begin_.back(), 0);
  if (listed < num_devices_) {
    std::vector<int64_t> without;
    for (int64_t d = listed; d < num_devices_; ++d) without.push_back(d);
    sink_.Add(Kind::kMissingStep, without,
              absl::StrCat("the order has programs for ", listed, " of ", num_devices_,
                           " devices: none for device", without.size() > 1 ? "s " : " ",
                           absl::StrJoin(without, ",")));
    membership_issues_ = true;
  }
  for (int64_t d = num_devices_; d < listed; ++d) {
    if (plan_.order[d].empty()) continue;
    sink_.Add(
        Kind::kWrongDevice, {d},
        absl::StrCat("the order has a program of ", plan_.order[d].size(), " steps for device ", d,
                     ", outside the mesh of ", num_devices_, " devices"));
    membership_issues_ = true;
  }
  const int num_collectives = static_cast<int>(plan_.collectives.size());
  for (int64_t d = 0; d < std::min(listed, num_devices_); ++d) {
    const std::vector<PlanStep>& order = plan_.order[d];
    std::vector<Entry>& program = programs_[d];
    program.resize(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      const PlanStep& p = order[i];
      const int limit = p.is_collective ? num_collectives : num_tasks_;
      if (p.id < 0 || p.id >= limit) {
        return Error("order of device ", d, ", step ", i, ": unknown ",
                     p.is_collective ? "collective " : "task ", p.id, " (the plan has ", limit,
                     ")");
      }
      Entry& e = program[i];
      e.step = p.is_collective ? num_tasks_ + p.id : p.id;
      if (p.is_collective) {
        e.rank = MemberRank(e.step, d);
        e.valid = e.rank >= 0;
        if (e.valid) {
          const int64_t k = slot(e.step, e.rank);
          e.first = slot_count_[k]++ == 0;
          if (e.first) slot_pos_[k] = static_cast<int64_t>(i);
        }
      } else {
        e.valid = task(e.step).device == d;
        if (e.valid) {
          e.first = task_count_[e.step]++ == 0;
          if (e.first) task_pos_[e.step] = static_cast<int64_t>(i);
        }
      }
      if (!e.valid) {
        const std::string owner = p.is_collective
                                      ? absl::StrCat("whose group is devices ",
                                                     absl::StrJoin(collective(e.step).devices, ","))
                                      : absl::StrCat("which runs on device ", task(e.step).device);
        sink_.Add(
            Kind::kWrongDevice, {d},
            absl::StrCat("device ", d, " lists ", Describe(e.step), " at step ", i, ", ", owner));
        membership_issues_ = true;
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// 1. Every step once where it belongs.

void Checker::CheckMembership() {
  auto count_issue = [&](int s, int64_t d, int64_t count) {
    if (count == 1) return;
    membership_issues_ = true;
    if (count == 0) {
      sink_.Add(Kind::kMissingStep, {d},
                absl::StrCat("device ", d, " does not list ", Describe(s)));
    } else {
      sink_.Add(Kind::kDuplicateStep, {d},
                absl::StrCat("device ", d, " lists ", Describe(s), " ", count, " times"));
    }
  };
  for (int s = 0; s < num_tasks_; ++s) count_issue(s, task(s).device, task_count_[s]);
  for (int s = num_tasks_; s < num_steps_; ++s) {
    const Collective& c = collective(s);
    for (size_t r = 0; r < c.devices.size(); ++r) {
      const int64_t count = slot_count_[slot(s, static_cast<int>(r))];
      if (c.kind == CollectiveKind::kSendRecv && r == 1 && count == 0 &&
          slot_count_[slot(s, 0)] > 0) {
        membership_issues_ = true;
        sink_.Add(Kind::kUnmatchedSend, {c.devices[0], c.devices[1]},
                  absl::StrCat("device ", c.devices[0], " sends ", Describe(s), " to device ",
                               c.devices[1], ", whose program never receives it"));
        continue;
      }
      count_issue(s, c.devices[r], count);
    }
  }
}

// ---------------------------------------------------------------------------
// 2. Local producers first.

void Checker::CheckDependencies() {
  std::vector<int> reported;
  for (int64_t d = 0; d < num_devices_; ++d) {
    const std::vector<Entry>& program = programs_[d];
    for (size_t i = 0; i < program.size(); ++i) {
      const Entry& e = program[i];
      if (!e.valid || !e.first) continue;
      reported.clear();
      for (ValueId v : LocalInputs(e.step, e.rank)) {
        const int p = producer_[v];
        if (p < 0 || std::find(reported.begin(), reported.end(), p) != reported.end()) continue;
        const int64_t at = Position(p, d);
        if (at <= static_cast<int64_t>(i)) continue;
        reported.push_back(p);
        sink_.Add(
            Kind::kDependency, {d},
            absl::StrCat("device ", d, " runs ", Describe(e.step), " at step ", i, " before ",
                         Describe(p), " at step ", at, ", which produces its input value ", v));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// 3. Shared collectives in the same order on both devices of every pair.

void Checker::CheckCollectiveOrder() {
  std::vector<int64_t> last_pos(num_devices_, -1);  // on device e, of the last shared one
  std::vector<int> last_step(num_devices_, -1);
  std::vector<int64_t> touched;
  absl::flat_hash_set<std::pair<int64_t, int64_t>> flagged;
  for (int64_t d = 0; d < num_devices_; ++d) {
    for (const Entry& e : programs_[d]) {
      if (!e.valid || !e.first || !is_collective(e.step)) continue;
      const Collective& c = collective(e.step);
      for (size_t r = 0; r < c.devices.size(); ++r) {
        const int64_t other = c.devices[r];
        if (other <= d) continue;
        const int64_t at = slot_pos_[slot(e.step, static_cast<int>(r))];
        if (at < 0) continue;
        if (last_pos[other] < 0) touched.push_back(other);
        if (at > last_pos[other]) {
          last_pos[other] = at;
          last_step[other] = e.step;
        } else if (at < last_pos[other] && flagged.insert({d, other}).second) {
          const std::string x = Describe(last_step[other]);
          const std::string y = Describe(e.step);
          sink_.Add(Kind::kCollectiveOrder, {d, other},
                    absl::StrCat("devices ", d, " and ", other, " issue ", x, " and ", y,
                                 " in different orders: device ", d, " issues ", x,
                                 " first, device ", other, " issues ", y, " first"));
        }
      }
    }
    for (int64_t o : touched) last_pos[o] = -1;
    touched.clear();
  }
}

// ---------------------------------------------------------------------------
// 4. The simulated run.

void Checker::Simulate() {
  const int64_t num_values = static_cast<int64_t>(plan_.values.size());
  Simulation sim(num_values, num_steps_, slot_begin_.back(), num_devices_);
  sim.arrived_count.assign(plan_.collectives.size(), 0);
  for (int64_t v = 0; v < num_values; ++v) sim.produced[v] = producer_[v] < 0;
  auto produce = [&](int s) {
    sim.done[s] = 1;
    for (ValueId v : Outputs(s)) {
      sim.produced[v] = 1;
      for (int64_t w = sim.wait_head[v]; w >= 0; w = sim.next_waiter[w]) {
        sim.wait_value[w] = -1;
        sim.work.push_back(w);
      }
      sim.wait_head[v] = -1;
    }
  };
  auto advance = [&](int64_t d) {
    const std::vector<Entry>& program = programs_[d];
    while (sim.pc[d] < program.size() && sim.wait_value[d] < 0) {
      const Entry& e = program[sim.pc[d]];
      if (!e.valid || sim.done[e.step]) {
        ++sim.pc[d];
        sim.cursor[d] = 0;
        continue;
      }
      absl::Span<const ValueId> in = LocalInputs(e.step, e.rank);
      while (sim.cursor[d] < in.size() && sim.produced[in[sim.cursor[d]]]) ++sim.cursor[d];
      if (sim.cursor[d] < in.size()) {
        const ValueId v = in[sim.cursor[d]];
        sim.wait_value[d] = v;
        sim.next_waiter[d] = sim.wait_head[v];
        sim.wait_head[v] = d;
        return;
      }
      if (is_collective(e.step)) {
        const int64_t k = slot(e.step, e.rank);
        if (!sim.arrived[k]) {
          sim.arrived[k] = 1;
          ++sim.arrived_count[e.step - num_tasks_];
        }
        if (sim.arrived_count[e.step - num_tasks_] < group_size(e.step)) return;
        for (int64_t m : collective(e.step).devices) {
          if (m == d) continue;
          ++sim.pc[m];
          sim.cursor[m] = 0;
          sim.work.push_back(m);
        }
      }
      produce(e.step);
      ++sim.pc[d];
      sim.cursor[d] = 0;
    }
  };
  for (int64_t d = num_devices_ - 1; d >= 0; --d) sim.work.push_back(d);
  while (!sim.work.empty()) {
    const int64_t d = sim.work.back();
    sim.work.pop_back();
    advance(d);
  }

  ReportStuck(sim);
}

void Checker::ReportStuck(const Simulation& sim) {
  // Wait-for graph of the stuck devices: each waits for one device (or for
  // nothing that can still move: -1).
  std::vector<int64_t> target(num_devices_, -1);
  std::vector<int> at_step(num_devices_, -1);
  std::vector<char> stuck(num_devices_, 0);
  bool any_stuck = false;
  auto not_arrived = [&](int s, int64_t prefer) -> int64_t {
    const int r = MemberRank(s, prefer);
    if (r >= 0 && !sim.arrived[slot(s, r)]) return prefer;
    const Collective& c = collective(s);
    for (size_t i = 0; i < c.devices.size(); ++i) {
      if (!sim.arrived[slot(s, static_cast<int>(i))]) return c.devices[i];
    }
    return -1;
  };
  for (int64_t d = 0; d < num_devices_; ++d) {
    if (sim.pc[d] >= programs_[d].size()) continue;
    stuck[d] = 1;
    any_stuck = true;
    const Entry& e = programs_[d][sim.pc[d]];
    at_step[d] = e.step;
    if (sim.wait_value[d] >= 0) {
      const int p = producer_[sim.wait_value[d]];
      target[d] = is_collective(p) ? not_arrived(p, d) : task(p).device;
    } else {
      target[d] = not_arrived(e.step, d);
    }
  }
  if (!any_stuck) return;
  for (int64_t d = 0; d < num_devices_; ++d) {
    if (stuck[d] && target[d] >= 0 && !stuck[target[d]]) target[d] = -1;  // finished
  }
  // Cycles of the functional graph, each from its smallest device.
  std::vector<char> state(num_devices_, 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<int64_t> path;
  int cycles = 0;
  bool self_wait = false;
  for (int64_t start = 0; start < num_devices_; ++start) {
    if (!stuck[start] || state[start] != 0) continue;
    path.clear();
    int64_t d = start;
    while (d >= 0 && state[d] == 0) {
      state[d] = 1;
      path.push_back(d);
      d = target[d];
    }
    if (d >= 0 && state[d] == 1) {
      std::vector<int64_t> cycle(std::find(path.begin(), path.end(), d), path.end());
      if (cycle.size() == 1) {
        self_wait = true;
      } else {
        std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
        std::vector<std::string> waits;
        for (int64_t x : cycle) {
          waits.push_back(absl::StrCat("device ", x, " waits at ", Describe(at_step[x]),
                                       " for device ", target[x]));
        }
        sink_.Add(Kind::kDeadlock, cycle,
                  absl::StrCat("the programs deadlock: ", absl::StrJoin(waits, "; ")));
        ++cycles;
      }
    }
    for (int64_t x : path) state[x] = 2;
  }
  if (cycles > 0 || self_wait || membership_issues_) return;
  // A stall no other issue explains: report the chain from the first stuck device.
  std::vector<int64_t> chain;
  std::vector<std::string> waits;
  std::fill(state.begin(), state.end(), 0);
  for (int64_t d = 0; d < num_devices_; ++d) {
    if (!stuck[d]) continue;
    for (int64_t x = d; x >= 0 && !state[x]; x = target[x]) {
      state[x] = 1;
      chain.push_back(x);
      waits.push_back(absl::StrCat("device ", x, " waits at ", Describe(at_step[x]),
                                   target[x] >= 0
                                       ? absl::StrCat(" for device ", target[x])
                                       : std::string(" for a device that has finished")));
    }
    break;
  }
  sink_.Add(Kind::kDeadlock, chain,
            absl::StrCat("the programs cannot finish: ", absl::StrJoin(waits, "; ")));
}

// ---------------------------------------------------------------------------
// 5. Live bytes per device.

void Checker::CheckMemory() {
  const int64_t num_values = static_cast<int64_t>(plan_.values.size());
  std::vector<char> is_output(num_values, 0);
  for (ValueId v : plan_.outputs) {
    if (v >= 0 && v < num_values) is_output[v] = 1;
  }
  // Accumulations folded as their micro-batch copies arrive: per value, the
  // accumulate step it is folded into (-1 when none).
  std::vector<int> folded_into(num_values, -1);
  for (int s = 0; s < num_tasks_; ++s) {
    const Task& t = task(s);
    for (ValueId v : t.inputs) {
      if (internal::FoldsIntoRunningSum(t, plan_.values[v], producer_[v] >= 0)) folded_into[v] = s;
    }
  }
  std::vector<int64_t> bytes(num_values);
  std::vector<int64_t> last_use(num_values, -1);
  std::vector<int64_t> live(num_devices_, 0);
  const bool by_role = spec_ != nullptr;
  std::vector<MemoryByRole> role_live(by_role ? num_devices_ : 0);
  std::vector<char> bucket(by_role ? num_values : 0, 3);
  auto role_add = [&](ValueId v, int64_t d, int64_t n) {
    if (!by_role) return;
    MemoryByRole& m = role_live[d];
    int64_t* field[] = {&m.weights, &m.gradients, &m.optimizer_states, &m.activations,
                        &m.communication};
    *field[static_cast<int>(bucket[v])] += n;
  };
  for (int64_t v = 0; v < num_values; ++v) {
    bytes[v] = ValueBytes(plan_.values[v]);
    if (by_role) bucket[v] = static_cast<char>(RoleBucket(static_cast<ValueId>(v)));
    if (producer_[v] < 0) {
      live[plan_.values[v].device] = SaturatingAdd(live[plan_.values[v].device], bytes[v]);
      role_add(static_cast<ValueId>(v), plan_.values[v].device, bytes[v]);
    }
  }
  for (int64_t d = 0; d < num_devices_; ++d) {
    const std::vector<Entry>& program = programs_[d];
    for (size_t i = 0; i < program.size(); ++i) {
      if (!program[i].valid || !program[i].first) continue;
      for (ValueId v : AllInputs(program[i].step)) {
        if (plan_.values[v].device != d || folded_into[v] == program[i].step) continue;
        last_use[v] = static_cast<int64_t>(i);
      }
    }
  }
  std::vector<int64_t> peak = live;
  std::vector<MemoryByRole> peak_roles = role_live;
  std::vector<int> peak_step(num_devices_, -1);
  for (int64_t v = 0; v < num_values; ++v) {
    if (producer_[v] < 0 && last_use[v] < 0 && !is_output[v]) {
      live[plan_.values[v].device] -= bytes[v];
      role_add(static_cast<ValueId>(v), plan_.values[v].device, -bytes[v]);
    }
  }
  std::vector<char> allocated(num_values, 0);
  auto allocate = [&](ValueId v, int64_t d) {
    allocated[v] = 1;
    live[d] = SaturatingAdd(live[d], bytes[v]);
    role_add(v, d, bytes[v]);
  };
  auto free_value = [&](ValueId v, int64_t d) {
    if (is_output[v] || allocated[v] == 2) return;
    if (producer_[v] >= 0 && allocated[v] == 0) return;  // read before it exists
    allocated[v] = 2;
    live[d] -= bytes[v];
    role_add(v, d, -bytes[v]);
  };
  for (int64_t d = 0; d < num_devices_; ++d) {
    const std::vector<Entry>& program = programs_[d];
    for (size_t i = 0; i < program.size(); ++i) {
      const Entry& e = program[i];
      if (!e.valid || !e.first) continue;
      const int64_t pos = static_cast<int64_t>(i);
      for (ValueId v : Outputs(e.step)) {
        if (plan_.values[v].device != d || allocated[v] != 0) continue;
        allocate(v, d);
        // The first copy folded into an accumulation brings its result.
        if (folded_into[v] >= 0) {
          for (ValueId sum : Outputs(folded_into[v])) {
            if (plan_.values[sum].device == d && allocated[sum] == 0) allocate(sum, d);
          }
        }
      }
      if (live[d] > peak[d]) {
        peak[d] = live[d];
        peak_step[d] = e.step;
        if (by_role) peak_roles[d] = role_live[d];
      }
      for (ValueId v : AllInputs(e.step)) {
        if (plan_.values[v].device == d && last_use[v] == pos) free_value(v, d);
      }
      for (ValueId v : Outputs(e.step)) {
        if (plan_.values[v].device == d && last_use[v] <= pos) free_value(v, d);
      }
    }
  }
  if (by_role) report_.peak_by_role = std::move(peak_roles);
  report_.peak_bytes = peak;
  if (!options_.memory_capacity_bytes.has_value()) return;
  const int64_t capacity = *options_.memory_capacity_bytes;
  for (int64_t d = 0; d < num_devices_; ++d) {
    if (peak[d] <= capacity) continue;
    sink_.Add(Kind::kMemory, {d},
              absl::StrCat("device ", d, " holds ", peak[d], " bytes of live values ",
                           peak_step[d] < 0 ? std::string("at the start")
                                            : absl::StrCat("at ", Describe(peak_step[d])),
                           ", above the capacity of ", capacity, " bytes"));
  }
}

absl::StatusOr<SafetyReport> Checker::Run() {
  const bool scheduled = std::any_of(plan_.order.begin(), plan_.order.end(),
                                     [](const std::vector<PlanStep>& p) { return !p.empty(); });
  if (plan_.is_factored() || !scheduled) return report_;
  report_.checked = true;
  LOOM_RETURN_IF_ERROR(Validate());
  LOOM_RETURN_IF_ERROR(DecodePrograms());
  CheckMembership();
  CheckDependencies();
  CheckCollectiveOrder();
  Simulate();
  CheckMemory();
  report_.issues = sink_.Finish();
  return std::move(report_);
}

}  // namespace

absl::string_view SafetyIssueKindName(SafetyIssue::Kind kind) {
  switch (kind) {
    case Kind::kMissingStep:
      return "missing_step";
    case Kind::kDuplicateStep:
      return "duplicate_step";
    case Kind::kWrongDevice:
      return "wrong_device";
    case Kind::kDependency:
      return "dependency";
    case Kind::kCollectiveOrder:
      return "collective_order";
    case Kind::kUnmatchedSend:
      return "unmatched_send";
    case Kind::kDeadlock:
      return "deadlock";
    case Kind::kMemory:
      return "memory";
  }
  return "unknown";
}

FailureClass SafetyFailureClass(SafetyIssue::Kind kind) {
  switch (kind) {
    case Kind::kDeadlock:
      return FailureClass::kDeadlock;
    case Kind::kMemory:
      return FailureClass::kMemory;
    default:
      return FailureClass::kScheduleOrder;
  }
}

absl::StatusOr<SafetyReport> CheckScheduleSafety(const ir::Plan& plan,
                                                 const SafetyOptions& options) {
  Checker checker(plan, options);
  return checker.Run();
}

absl::StatusOr<SafetyReport> CheckScheduleSafety(const ir::Graph& spec, const ir::Plan& plan,
                                                 const SafetyOptions& options) {
  if (plan.is_factored()) return CheckFactoredScheduleSafety(spec, plan, options);
  Checker checker(plan, options, &spec);
  return checker.Run();
}

}  // namespace loom::verify
